package mesh

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

func peer(site, gw string, st State, lastAnswer time.Time) Peer {
	return Peer{Site: site, Gateway: gw, State: st, Path: Direct, Interval: 200 * time.Millisecond,
		RTT: time.Millisecond, PathMTU: 1420, LastAnswer: lastAnswer}
}

// TestRowStates: a remote site's row from its gateways' links.
func TestRowStates(t *testing.T) {
	now := t0.Add(time.Minute)
	fresh := now.Add(-50 * time.Millisecond)
	hub := peer("c", "gw-c1", Up, fresh)
	hub.Path, hub.Via = Hub, []string{"b/gw-b1", "b/gw-b2"}
	mtu := peer("b", "gw-b2", Up, fresh)
	mtu.MTUDegraded = true
	cases := []struct {
		name  string
		peers []Peer
		state State
		path  string
		up    int
	}{
		{"all up", []Peer{peer("b", "gw-b1", Up, fresh), peer("b", "gw-b2", Up, fresh)}, Up, "direct", 2},
		{"one down: standby", []Peer{peer("b", "gw-b1", Down, fresh), peer("b", "gw-b2", Up, fresh)}, Degraded, "standby gw-b2", 1},
		{"all down", []Peer{peer("b", "gw-b1", Down, fresh), peer("b", "gw-b2", Down, fresh)}, Down, "-", 0},
		{"never answered", []Peer{peer("b", "gw-b1", Connecting, time.Time{})}, Connecting, "-", 0},
		{"down and connecting", []Peer{peer("b", "gw-b1", Down, fresh), peer("b", "gw-b2", Connecting, time.Time{})}, Down, "-", 0},
		{"hub", []Peer{hub}, Up, "hub b", 1},
		{"small packets only", []Peer{peer("b", "gw-b1", Up, fresh), mtu}, Degraded, "direct", 2},
		// Up in the router, but silent for more than two intervals
		// (idle: 2 s each) plus a round trip: red before the third.
		{"silent idle", []Peer{peer("b", "gw-b1", Up, now.Add(-4002*time.Millisecond))}, Down, "-", 0},
		{"not yet silent idle", []Peer{peer("b", "gw-b1", Up, now.Add(-3990*time.Millisecond))}, Up, "direct", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(TrackerOptions{Site: "a", Gateway: "gw-a1"})
			rows := tr.Rows(c.peers, now)
			if len(rows) != 1 {
				t.Fatalf("%d rows, want 1", len(rows))
			}
			r := rows[0]
			if r.State != c.state || PathText(r.Path, r.Via) != c.path || r.GatewaysUp != c.up {
				t.Errorf("row %s %q up %d, want %s %q up %d", r.State, PathText(r.Path, r.Via), r.GatewaysUp, c.state, c.path, c.up)
			}
		})
	}
}

// TestSilentActive: a gateway carrying our traffic is probed every
// interval, so it shows red two intervals (and a round trip) after its
// last answer, not two idle intervals.
func TestSilentActive(t *testing.T) {
	tr := NewTracker(TrackerOptions{Site: "a", Gateway: "gw-a1"})
	p := peer("b", "gw-b1", Up, t0)
	for i := range 5 {
		p.TxPackets = uint64(100 * (i + 1))
		tr.Observe([]Peer{p}, t0.Add(time.Duration(i)*time.Second))
	}
	at := t0.Add(4 * time.Second)
	p.LastAnswer = at
	for _, c := range []struct {
		after time.Duration
		red   bool
	}{{399 * time.Millisecond, false}, {402 * time.Millisecond, true}} {
		l := tr.Rows([]Peer{p}, at.Add(c.after))[0].Links[0]
		if l.State.Red() != c.red {
			t.Errorf("%v after the last answer: %s (interval %vms), want red %v", c.after, l.State, l.IntervalMs, c.red)
		}
	}
}

// TestLossAndRTT: loss counts probes sent up to the sample before the
// newest against answers up to the newest; the RTT is the median of
// the window's answers.
func TestLossAndRTT(t *testing.T) {
	tr := NewTracker(TrackerOptions{Site: "a", Gateway: "gw-a1", Window: 10 * time.Second})
	p := peer("b", "gw-b1", Up, t0)
	rtts := []time.Duration{1, 9, 2, 3, 100}
	for i := range 5 {
		p.ProbesSent = uint64(10 * i)
		p.ProbeReplies = uint64(8 * i)
		p.RTT = rtts[i] * time.Millisecond
		p.LastAnswer = t0.Add(time.Duration(i) * time.Second)
		tr.Observe([]Peer{p}, p.LastAnswer)
	}
	l := tr.Rows([]Peer{p}, p.LastAnswer)[0].Links[0]
	// sent 0..30 = 30, answered 0..32 = 32: none lost yet.
	if l.Loss != 0 || l.Probes != 30 {
		t.Errorf("loss %v over %d, want 0 over 30", l.Loss, l.Probes)
	}
	p.ProbesSent, p.ProbeReplies = 50, 32
	tr.Observe([]Peer{p}, t0.Add(5*time.Second))
	p.ProbesSent, p.ProbeReplies = 60, 32
	tr.Observe([]Peer{p}, t0.Add(6*time.Second))
	l = tr.Rows([]Peer{p}, t0.Add(6*time.Second))[0].Links[0]
	// sent 0..50 = 50, answered 32.
	if l.Loss != 18.0/50 || l.Probes != 50 {
		t.Errorf("loss %v over %d, want %v over 50", l.Loss, l.Probes, 18.0/50)
	}
	// RTT 1 (first sample: nothing answered before it counts too), 9, 2, 3, 100.
	if l.RTTMs != 3 {
		t.Errorf("rtt %vms, want the median 3ms", l.RTTMs)
	}
}

// TestSince: a row's since moves only when its state or path changes.
func TestSince(t *testing.T) {
	tr := NewTracker(TrackerOptions{Site: "a", Gateway: "gw-a1"})
	up := peer("b", "gw-b1", Up, t0)
	r1 := tr.Rows([]Peer{up}, t0)[0]
	up.RTT = 5 * time.Millisecond
	r2 := tr.Rows([]Peer{up}, t0.Add(time.Second))[0]
	down := up
	down.State = Down
	r3 := tr.Rows([]Peer{down}, t0.Add(2*time.Second))[0]
	if !r1.Since.Equal(t0) || !r2.Since.Equal(t0) || !r3.Since.Equal(t0.Add(2*time.Second)) {
		t.Errorf("since %v %v %v", r1.Since, r2.Since, r3.Since)
	}
}

// TestRouterRows: the router's view has no silent gateways; the live
// view's red does not leak into it.
func TestRouterRows(t *testing.T) {
	tr := NewTracker(TrackerOptions{Site: "a", Gateway: "gw-a1"})
	now := t0.Add(time.Minute)
	p := peer("b", "gw-b1", Up, now.Add(-10*time.Second))
	if live, router := tr.Rows([]Peer{p}, now)[0], tr.RouterRows([]Peer{p}, now)[0]; live.State != Down || router.State != Up {
		t.Errorf("live %s router %s, want down and up", live.State, router.State)
	}
}

// TestTrackerConcurrent: the sampling loop and page requests share a
// tracker (run with -race).
func TestTrackerConcurrent(t *testing.T) {
	tr := NewTracker(TrackerOptions{Site: "a", Gateway: "gw-a1"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			p := peer("b", "gw-b1", Up, t0.Add(time.Duration(i)*time.Millisecond))
			p.ProbesSent, p.ProbeReplies = uint64(i), uint64(i)
			tr.Observe([]Peer{p}, t0.Add(time.Duration(i)*time.Millisecond))
		}
	}()
	for i := range 200 {
		tr.Rows([]Peer{peer("b", "gw-b1", Up, t0)}, t0.Add(time.Duration(i)*time.Millisecond))
		tr.RouterRows([]Peer{peer("b", "gw-b1", Up, t0)}, t0)
	}
	<-done
}
