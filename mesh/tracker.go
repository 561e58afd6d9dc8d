package mesh

import (
	"slices"
	"sync"
	"time"
)

// Peer is what the router says of one remote gateway at one moment: the
// daemon converts its peer states to these. Counters only grow.
type Peer struct {
	Site, Gateway string
	// State is the liveness state: Up, Down or Connecting.
	State  State
	Reason string // why it is down
	// Path and Via: Direct, or Hub through Via ("site/gateway").
	Path Path
	Via  []string
	// Interval is the configured probe interval.
	Interval time.Duration
	// RTT is the round trip of the newest answered probe (0: none).
	RTT                      time.Duration
	ProbesSent, ProbeReplies uint64
	TxPackets                uint64
	PathMTU                  int
	MTUDegraded              bool
	LastAnswer               time.Time
}

// TrackerOptions configure a Tracker. The zero value of each field takes
// its default.
type TrackerOptions struct {
	// Site and Gateway name the gateway whose rows these are.
	Site, Gateway string
	// Window is how far back RTT medians and loss look (30 s).
	Window time.Duration
	// Every is how often Observe is called (1 s): the resolution of
	// the window and of activity.
	Every time.Duration
	// ActiveWindow and IdleFactor mirror the router's probe pacing
	// (router.ActiveWindow, router.IdleProbeFactor): a gateway that got
	// none of our data for ActiveWindow is probed IdleFactor times less
	// often, so its answers are that much further apart.
	ActiveWindow time.Duration
	IdleFactor   int
}

// Tracker keeps the recent history of every remote gateway (probe RTTs,
// probe counters, traffic) that one gateway's rows need beyond the
// router's current values. Safe for concurrent use.
type Tracker struct {
	o  TrackerOptions
	mu sync.Mutex
	// gws and rows are guarded by mu.
	gws  map[[2]string]*history
	rows map[rowKey]rowMemo
}

// rowKey names a row's memo: the live view's and the router's view's
// rows change at different moments.
type rowKey struct {
	site   string
	router bool
}

type rowMemo struct {
	state State
	path  Path
	since time.Time
}

// sample is one Observe's reading of a gateway's counters.
type sample struct {
	at            time.Time
	sent, replies uint64
}

// history is one remote gateway's recent past.
type history struct {
	samples  []sample        // oldest first, within the window
	rtts     []time.Duration // newest RTT at each sample where an answer came
	rttAt    []time.Time
	lastTx   uint64
	txAt     time.Time // when lastTx was first seen
	seenTx   bool
	observed time.Time
}

// NewTracker returns a tracker for the gateway o names.
func NewTracker(o TrackerOptions) *Tracker {
	if o.Window <= 0 {
		o.Window = 30 * time.Second
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.ActiveWindow <= 0 {
		o.ActiveWindow = 10 * time.Second
	}
	if o.IdleFactor <= 0 {
		o.IdleFactor = 10
	}
	return &Tracker{o: o, gws: map[[2]string]*history{}, rows: map[rowKey]rowMemo{}}
}

// Observe records the peers' counters at now. Gateways no longer among
// peers are forgotten.
func (t *Tracker) Observe(peers []Peer, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keep := make(map[[2]string]bool, len(peers))
	for _, p := range peers {
		k := [2]string{p.Site, p.Gateway}
		keep[k] = true
		h := t.gws[k]
		if h == nil {
			h = &history{}
			t.gws[k] = h
		}
		if !h.seenTx || p.TxPackets != h.lastTx {
			// The change happened at most Every ago: counting from
			// the previous sample keeps "active" no longer than the
			// router's, so a red verdict never comes from a pace
			// the router is not keeping.
			h.txAt = now.Add(-t.o.Every)
			if !h.seenTx {
				h.txAt = time.Time{}
			}
			h.lastTx, h.seenTx = p.TxPackets, true
		}
		if n := len(h.samples); p.RTT > 0 && (n == 0 || p.ProbeReplies != h.samples[n-1].replies) {
			h.rtts = append(h.rtts, p.RTT)
			h.rttAt = append(h.rttAt, now)
		}
		h.samples = append(h.samples, sample{at: now, sent: p.ProbesSent, replies: p.ProbeReplies})
		cut := now.Add(-t.o.Window)
		i := 0
		for i < len(h.samples)-1 && h.samples[i].at.Before(cut) {
			i++
		}
		h.samples = h.samples[i:]
		j := 0
		for j < len(h.rttAt) && h.rttAt[j].Before(cut) {
			j++
		}
		h.rtts, h.rttAt = h.rtts[j:], h.rttAt[j:]
		h.observed = now
	}
	for k := range t.gws {
		if !keep[k] {
			delete(t.gws, k)
		}
	}
}

// Rows returns this gateway's rows, one per remote site, from the peers'
// current state (read just now, so liveness is current to the call) and
// the history Observe kept. A gateway up in the router that has been
// silent for two probe intervals is red (Silent).
func (t *Tracker) Rows(peers []Peer, now time.Time) []Row { return t.rowsOf(peers, now, false) }

// RouterRows are Rows as the router sees them: no Silent, a gateway is
// red once the router has it down. Published rows use them, so a single
// lost probe costs no API write.
func (t *Tracker) RouterRows(peers []Peer, now time.Time) []Row { return t.rowsOf(peers, now, true) }

func (t *Tracker) rowsOf(peers []Peer, now time.Time, router bool) []Row {
	t.mu.Lock()
	defer t.mu.Unlock()
	bySite := map[string][]Link{}
	var order []string
	for _, p := range peers {
		if _, ok := bySite[p.Site]; !ok {
			order = append(order, p.Site)
		}
		bySite[p.Site] = append(bySite[p.Site], t.link(p, now, router))
	}
	slices.Sort(order)
	rows := make([]Row, 0, len(order))
	for _, site := range order {
		r := foldRow(t.o.Site, t.o.Gateway, site, bySite[site])
		k := rowKey{site, router}
		m, ok := t.rows[k]
		if !ok || m.state != r.State || m.path != r.Path {
			m = rowMemo{state: r.State, path: r.Path, since: now}
			t.rows[k] = m
		}
		r.Since = m.since
		rows = append(rows, r)
	}
	for k := range t.rows {
		if _, ok := bySite[k.site]; !ok && k.router == router {
			delete(t.rows, k)
		}
	}
	return rows
}

// link is p as a Link at now.
func (t *Tracker) link(p Peer, now time.Time, router bool) Link {
	l := Link{Gateway: p.Gateway, State: p.State, Reason: p.Reason, Path: p.Path, Via: p.Via,
		MTU: p.PathMTU, MTUDegraded: p.MTUDegraded, LastAnswer: p.LastAnswer}
	if l.Path == None {
		l.Path = Direct
	}
	h := t.gws[[2]string{p.Site, p.Gateway}]
	iv := p.Interval
	if h == nil || h.txAt.IsZero() || now.Sub(h.txAt) >= t.o.ActiveWindow {
		iv *= time.Duration(t.o.IdleFactor)
	}
	l.IntervalMs = ms(iv)
	rtt := p.RTT
	if h != nil && len(h.rtts) > 0 {
		rs := make([]float64, len(h.rtts))
		for i, r := range h.rtts {
			rs[i] = float64(r)
		}
		rtt = time.Duration(median(rs))
	}
	l.RTTMs = ms(rtt)
	if h != nil {
		l.Loss, l.Probes = loss(h.samples)
	}
	if !router && l.State == Up && !p.LastAnswer.IsZero() && now.Sub(p.LastAnswer) > SilentAfter(iv, p.RTT) {
		l.State, l.Reason = Silent, "no answer for 2 probe intervals"
	}
	return l
}

// SilentAfter is how long an up gateway may go without answering before
// it shows red: two probe intervals in force (iv) and the newest round
// trip, since an answer comes a round trip after its probe.
func SilentAfter(iv, rtt time.Duration) time.Duration { return 2*iv + rtt }

// loss is the share of probes unanswered between the oldest sample and
// the one before the newest (probes sent since may still be in flight),
// counting the answers up to the newest, and how many probes that is.
func loss(s []sample) (float64, uint64) {
	if len(s) < 3 {
		return 0, 0
	}
	first, lagged, last := s[0], s[len(s)-2], s[len(s)-1]
	sent := lagged.sent - first.sent
	if sent == 0 {
		return 0, 0
	}
	answered := last.replies - first.replies
	if answered >= sent {
		return 0, sent
	}
	return float64(sent-answered) / float64(sent), sent
}

// foldRow folds one remote site's links into a row.
func foldRow(fromSite, fromGW, to string, links []Link) Row {
	slices.SortFunc(links, func(a, b Link) int {
		if a.Gateway < b.Gateway {
			return -1
		}
		if a.Gateway > b.Gateway {
			return 1
		}
		return 0
	})
	r := Row{FromSite: fromSite, FromGateway: fromGW, To: to, Gateways: len(links), Links: links}
	var red, mtuBad int
	var rtts []float64
	var sent, lost float64
	var upNames, hubs []string
	hub := false
	for _, l := range links {
		if l.LastAnswer.After(r.Measured) {
			r.Measured = l.LastAnswer
		}
		switch {
		case l.State == Up:
			r.GatewaysUp++
			upNames = append(upNames, l.Gateway)
			if l.RTTMs > 0 {
				rtts = append(rtts, l.RTTMs)
			}
			sent += float64(l.Probes)
			lost += l.Loss * float64(l.Probes)
			if l.MTU > 0 && (r.MTU == 0 || l.MTU < r.MTU) {
				r.MTU = l.MTU
			}
			if l.MTUDegraded {
				mtuBad++
			}
			if l.Path == Hub {
				hub = true
				for _, v := range l.Via {
					if site, _, ok := cut(v); ok && !slices.Contains(hubs, site) {
						hubs = append(hubs, site)
					}
				}
			}
		case l.State.Red():
			red++
		}
	}
	if r.GatewaysUp == 0 {
		// Nothing carries flows: the loss is that of every probe.
		for _, l := range links {
			sent += float64(l.Probes)
			lost += l.Loss * float64(l.Probes)
		}
	}
	if sent > 0 {
		r.Loss = lost / sent
	}
	r.RTTMs = median(rtts)
	switch {
	case r.GatewaysUp == 0 && red > 0:
		r.State = Down
	case r.GatewaysUp == 0:
		r.State = Connecting
	case r.GatewaysUp < r.Gateways || mtuBad > 0:
		r.State = Degraded
	default:
		r.State = Up
	}
	switch {
	case r.GatewaysUp == 0:
		r.Path = None
	case hub:
		slices.Sort(hubs)
		r.Path, r.Via = Hub, hubs
	case r.GatewaysUp < r.Gateways:
		r.Path, r.Via = Standby, upNames
	default:
		r.Path = Direct
	}
	return r
}

// cut splits "site/gateway".
func cut(v string) (string, string, bool) {
	for i := 0; i < len(v); i++ {
		if v[i] == '/' {
			return v[:i], v[i+1:], true
		}
	}
	return v, "", false
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
