package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/router"
)

// stepClock is a router.Clock whose ticker the test drives: tick
// advances the time by drainPoll and delivers it.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
	c   chan time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Ticker(time.Duration) (<-chan time.Time, func()) { return c.c, func() {} }

// drainPeers is a drainRouter with two remote gateways whose counters
// follow the test's script; each Peers call is signalled on read, so
// the test knows the drain has looked before it moves the clock.
type drainPeers struct {
	mu       sync.Mutex
	draining bool
	bytes    uint64 // data bytes so far, split over both gateways
	probes   uint64 // probes sent to each gateway so far
	read     chan struct{}
}

func (p *drainPeers) SetDraining(on bool) { p.mu.Lock(); p.draining = on; p.mu.Unlock() }

func (p *drainPeers) Peers() []router.PeerStats {
	p.mu.Lock()
	defer func() { p.mu.Unlock(); p.read <- struct{}{} }()
	created := time.Unix(1, 0)
	mk := func(name string, tx, rx uint64) router.PeerStats {
		s := router.PeerStats{Site: "b", Name: name, TxBytes: tx, RxBytes: rx, SessionCreated: created}
		s.Live.ProbesSent = p.probes
		return s
	}
	return []router.PeerStats{mk("gw-b1", p.bytes/2, 0), mk("gw-b2", 0, p.bytes-p.bytes/2)}
}

// TestDrainer: the drain ends once no data crossed the gateway for the
// quiet time, or at the deadline while data still flows, or at once when
// its context ends (a second signal); it turns readiness off and tells
// the router first, and counts the peers that got a probe since.
func TestDrainer(t *testing.T) {
	const quiet, timeout = 200 * time.Millisecond, 2 * time.Second
	tests := []struct {
		name string
		// data says whether data crosses the gateway in the poll
		// that ends at elapsed; probed whether a probe went to each
		// peer by then.
		data     func(elapsed time.Duration) bool
		probed   func(elapsed time.Duration) bool
		cutAfter time.Duration // cancel the context after this (0: never)
		want     drainReport
	}{
		{"idle: drained after the quiet time",
			func(time.Duration) bool { return false }, func(e time.Duration) bool { return e >= drainPoll }, 0,
			drainReport{Outcome: drainQuiet, Took: quiet, Peers: 2, Notified: 2}},
		{"data until 1 s, then quiet",
			func(e time.Duration) bool { return e <= time.Second }, func(e time.Duration) bool { return e >= drainPoll }, 0,
			drainReport{Outcome: drainQuiet, Took: time.Second + quiet, Peers: 2, Notified: 2, Bytes: 20 * 1000, LastData: time.Second}},
		{"data never stops: the deadline",
			func(time.Duration) bool { return true }, func(e time.Duration) bool { return e >= drainPoll }, 0,
			drainReport{Outcome: drainDeadline, Took: timeout, Peers: 2, Notified: 2, Bytes: 40 * 1000, LastData: timeout}},
		{"peers never probed: notified none, drained all the same",
			func(time.Duration) bool { return false }, func(time.Duration) bool { return false }, 0,
			drainReport{Outcome: drainQuiet, Took: quiet, Peers: 2}},
		{"a second signal cuts it short",
			func(time.Duration) bool { return true }, func(e time.Duration) bool { return e >= drainPoll }, 300 * time.Millisecond,
			drainReport{Outcome: drainCut, Took: 300 * time.Millisecond, Peers: 2, Notified: 2, Bytes: 5 * 1000, LastData: 250 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			clock := &stepClock{now: start, c: make(chan time.Time)}
			peers := &drainPeers{read: make(chan struct{}, 1)}
			ready := true
			var logs bytes.Buffer
			d := drainer{log: slog.New(slog.NewTextHandler(&logs, nil)), r: peers, clock: clock,
				setDraining: func() { ready = false }, status: func(string) {}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan drainReport, 1)
			go func() { done <- d.run(ctx, timeout, quiet) }()
			<-peers.read // the counters at the start
			if ready || !peers.draining {
				t.Fatalf("drain started: ready %v, router draining %v; want readiness off and the router told first", ready, peers.draining)
			}
			for elapsed := drainPoll; ; elapsed += drainPoll {
				if elapsed > 2*timeout {
					t.Fatal("the drain did not end")
				}
				clock.mu.Lock()
				clock.now = start.Add(elapsed)
				clock.mu.Unlock()
				peers.mu.Lock()
				if tt.data(elapsed) {
					peers.bytes += 1000
				}
				if tt.probed(elapsed) {
					peers.probes = 1
				}
				peers.mu.Unlock()
				if tt.cutAfter > 0 && elapsed >= tt.cutAfter {
					cancel()
					break
				}
				select {
				case clock.c <- clock.now:
					<-peers.read
				case rep := <-done:
					t.Fatalf("drain ended before %v: %+v", elapsed, rep)
				}
				if tt.cutAfter == 0 && (elapsed >= tt.want.Took) {
					break
				}
			}
			got := <-done
			if got != tt.want {
				t.Errorf("drain: %+v\nwant    %+v", got, tt.want)
			}
			// State changes only: started, notified (unless it
			// ended before every peer was, or a second passed), and
			// how it ended.
			want := 3
			if tt.want.Notified < tt.want.Peers && tt.want.Took < time.Second {
				want = 2
			}
			if n := strings.Count(logs.String(), "\n"); n != want {
				t.Errorf("%d log lines, want %d:\n%s", n, want, logs.String())
			}
		})
	}
}

// TestDrainReadiness: a drain turns /readyz to 503 with "draining",
// control status not ready, and the router's draining flag on.
func TestDrainReadiness(t *testing.T) {
	g, _ := newLabAB(t).startA(t)
	readyz := readyz(t, g)
	if _, rep := readyz(); rep.Draining || g.r.Draining() {
		t.Fatalf("before the drain: %+v, router draining %v", rep, g.r.Draining())
	}
	clock := &stepClock{now: time.Unix(1000, 0), c: make(chan time.Time)}
	d := drainer{log: slog.New(slog.DiscardHandler), r: g.r, clock: clock,
		setDraining: func() { g.draining.Store(true) }, status: func(string) {}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan drainReport, 1)
	go func() { done <- d.run(ctx, time.Second, 100*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for !g.r.Draining() {
		if time.Now().After(deadline) {
			t.Fatal("router not told to drain")
		}
		time.Sleep(time.Millisecond)
	}
	code, rep := readyz()
	if code != http.StatusServiceUnavailable || rep.Ready || !rep.Draining {
		t.Errorf("draining: /readyz %d %+v, want 503 with draining", code, rep)
	}
	if st := g.status(); st.Ready {
		t.Error("control status ready while draining")
	}
}

// TestStopSignals: the first SIGTERM starts the drain, the second stop
// signal (SIGINT here) stops at once.
func TestStopSignals(t *testing.T) {
	ctx, drain, stop := StopSignals(context.Background(), slog.New(slog.DiscardHandler))
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-drain:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not start the drain")
	}
	if ctx.Err() != nil {
		t.Fatal("the first signal stopped at once instead of draining")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a second signal did not stop at once")
	}
}
