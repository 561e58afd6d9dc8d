package router

import (
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ReachLogInterval is the most often the summary of unreachable gateways
// is logged while any stays unreachable.
const ReachLogInterval = time.Minute

// reachLogNamed is how many gateways a line names; the rest are counted.
const reachLogNamed = 5

// reachLog reports what happens to many gateways at once without a log
// line per gateway per retry. A 100k-prefix catalog in a namespace
// without a route to the endpoints once wrote 7,987 lines in 80 s for
// 597 gateways, and journald's rate limit then hid everything else.
//
//   - A gateway becomes unreachable when sending to it fails or a
//     handshake with it gives up, and reachable again when a session
//     with it is set up. The gateways that changed state since the last
//     timers run are logged together, one line per direction.
//   - While any stays unreachable, a summary is logged at most once per
//     ReachLogInterval: how many, the first few named, failures since.
//   - First sessions with gateways (none usable before) are logged
//     together the same way; rekeys only at debug level.
//   - So are the liveness changes of prober.run (logChange): gateways
//     that went down, came up, came up again.
//
// Counters for metrics: Peer.hsSendFailed per gateway, and unreachable.
// Owned by the handshake loop (every method runs there) except
// unreachable, which any goroutine may read.
type reachLog struct {
	failing     map[*Peer]reachFailure
	newly, back []*Peer
	firstErr    reachFailure // of the first in newly
	sessions    []*Peer
	// Liveness changes (prober.run): gateways that went down (with
	// what the first of them looked like), came up, came up again.
	downs       []*Peer
	firstDown   []any
	up, upAgain []*Peer
	failures    int // since the last summary
	lastSummary time.Time
	unreachable atomic.Int64 // len(failing)
}

type reachFailure struct {
	since time.Time
	what  string
	err   error
}

// fail notes that what failed for p at now (err may be nil).
func (l *reachLog) fail(p *Peer, what string, err error, now time.Time) {
	l.failures++
	if _, ok := l.failing[p]; ok {
		return
	}
	if l.failing == nil {
		l.failing = make(map[*Peer]reachFailure)
	}
	f := reachFailure{since: now, what: what, err: err}
	l.failing[p] = f
	l.unreachable.Store(int64(len(l.failing)))
	if len(l.newly) == 0 {
		l.firstErr = f
	}
	l.newly = append(l.newly, p)
}

// reached notes that a session with p was set up; first is set when p
// had no usable session before.
func (l *reachLog) reached(p *Peer, first bool) {
	if first {
		l.sessions = append(l.sessions, p)
	}
	if _, ok := l.failing[p]; !ok {
		return
	}
	delete(l.failing, p)
	l.unreachable.Store(int64(len(l.failing)))
	l.back = append(l.back, p)
}

// down notes that p went down: its probes unanswered for unproven, last
// heard from heard ago, probed every interval.
func (l *reachLog) down(p *Peer, unproven, heard, interval time.Duration) {
	if len(l.downs) == 0 {
		l.firstDown = append(l.firstDown[:0], "endpoint", p.Endpoint(), "unanswered_for", unproven.Round(time.Millisecond),
			"last_heard", heard.Round(time.Millisecond), "probe_interval", interval)
	}
	l.downs = append(l.downs, p)
}

// check notes p reachable again if it failed and now has a session set
// up since (as responder too: confirm runs in the outside loop).
func (l *reachLog) check(p *Peer, now time.Time) {
	f, ok := l.failing[p]
	if !ok {
		return
	}
	if kp := p.current.Load(); kp != nil && usable(kp, now) && kp.Created.After(f.since) {
		l.reached(p, false)
	}
}

// flush logs what changed since the last call and, when due, the
// summary. order is the configured peers, so names come in config order.
func (l *reachLog) flush(log *slog.Logger, order []*Peer, now time.Time) {
	if len(l.newly) > 0 {
		attrs := []any{"count", len(l.newly), "gateways", names(l.newly), "failed", l.firstErr.what}
		if l.firstErr.err != nil {
			attrs = append(attrs, "err", l.firstErr.err)
		}
		attrs = append(attrs, "unreachable", len(l.failing))
		log.Warn("gateways unreachable", attrs...)
		if l.lastSummary.IsZero() {
			l.lastSummary = now // the summary follows a minute later
		}
	}
	if len(l.back) > 0 {
		log.Info("gateways reachable again", "count", len(l.back), "gateways", names(l.back), "unreachable", len(l.failing))
	}
	if len(l.sessions) > 0 {
		log.Info("sessions established", "count", len(l.sessions), "gateways", names(l.sessions))
	}
	if len(l.downs) > 0 {
		log.Warn("gateways down: our probes go unanswered, flows move to their sites' other gateways",
			append([]any{"count", len(l.downs), "gateways", names(l.downs)}, l.firstDown...)...)
	}
	if len(l.upAgain) > 0 {
		log.Info("gateways up again", "count", len(l.upAgain), "gateways", names(l.upAgain))
	}
	if len(l.up) > 0 {
		log.Info("gateways up", "count", len(l.up), "gateways", names(l.up))
	}
	for _, s := range []*[]*Peer{&l.downs, &l.upAgain, &l.up} {
		clear(*s)
		*s = (*s)[:0]
	}
	for p := range l.failing {
		if p.removed.Load() {
			delete(l.failing, p)
			l.unreachable.Store(int64(len(l.failing)))
		}
	}
	clear(l.newly)
	clear(l.back)
	clear(l.sessions)
	l.newly, l.back, l.sessions = l.newly[:0], l.back[:0], l.sessions[:0]
	if len(l.failing) == 0 {
		l.lastSummary, l.failures = time.Time{}, 0
		return
	}
	if now.Sub(l.lastSummary) < ReachLogInterval {
		return
	}
	var named []*Peer
	for _, p := range order {
		if _, ok := l.failing[p]; ok && len(named) < reachLogNamed {
			named = append(named, p)
		}
	}
	log.Warn("gateways still unreachable", "count", len(l.failing), "gateways", names(named),
		"failures", l.failures, "since", now.Sub(l.lastSummary).Round(time.Second))
	l.lastSummary, l.failures = now, 0
}

// names lists the first reachLogNamed peers as site/gateway, and how
// many more there are.
func names(ps []*Peer) string {
	var b strings.Builder
	for i, p := range ps {
		if i == reachLogNamed {
			b.WriteString(" and " + strconv.Itoa(len(ps)-i) + " more")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.site + "/" + p.name)
	}
	return b.String()
}
