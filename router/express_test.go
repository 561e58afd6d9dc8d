package router

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/steer"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
	"golang.org/x/sys/unix"
)

// fifoThreads counts this process's SCHED_FIFO threads by priority.
func fifoThreads(t *testing.T) map[int]int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue // the thread exited meanwhile
		}
		if attr.Policy == unix.SCHED_FIFO {
			got[int(attr.Priority)]++
		}
	}
	return got
}

// TestExpressLoops runs A with a steered express lane (the kernel's
// steering program is stood in for by injecting into A's express TUN
// queue) and B with an unsteered one, each with a real-time priority of
// its own, on loopback express socket groups. A packet on A's express
// queue crosses on the express lane: A seals it at once with the express
// lane byte, B's express socket receives it. The express loops that wait
// on kernel devices (both outside loops; A's inside loop reads a channel
// TUN, which cannot) run on SCHED_FIFO threads of their own, which exit
// with the routers.
func TestExpressLoops(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_NICE) for SCHED_FIFO; runs in CI")
	}
	if n := len(fifoThreads(t)); n != 0 {
		t.Fatalf("%d real-time threads before the routers start", n)
	}
	gws := newGateways(t, bhcrypto.AESGCM, nil, "bh-a", "bh-b")
	a, b := gws[0], gws[1]
	xs := make([]*udp.LinuxBind, 2)
	for i, g := range gws {
		xs[i] = g.useExpressGroup(t)
	}
	ax := tun.NewChannel("bh-ax", 1420)
	// A's outside loop keeps its P while it waits, on a P added for it,
	// as the daemon runs it; B's gives it back.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1))
	a.opts = func(o *Options) {
		o.Express, o.ExpressTUN, o.ExpressSteered, o.ExpressPriority, o.ExpressKeepsP = xs[0], ax, true, 7, true
	}
	b.opts = func(o *Options) { o.Express, o.ExpressPriority = xs[1], 8 }
	cfgA := twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfgB := twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	a.start(t, cfgA)
	b.start(t, cfgB)

	// Until A has heard from B that it has an express lane (probes),
	// A's packets go on B's lane socket: send until one goes express.
	inject := func() {
		t.Helper()
		if err := ax.Inject(udpPacket(t, podA, podB, []byte("ping"))); err != nil {
			t.Fatal(err)
		}
		if got := b.expectPacket(t); !bytes.Contains(got, []byte("ping")) {
			t.Fatalf("B delivered % x, want the injected packet", got)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.r.express.count.sent.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("A sent nothing on the express lane in 10 s")
		}
		inject()
		time.Sleep(20 * time.Millisecond)
	}
	// Now every packet goes express, and B reads it from its express
	// socket (which may also get a handshake: at least one more).
	sent, received := a.r.express.count.sent.Load(), b.r.express.count.received.Load()
	inject()
	if d := a.r.express.count.sent.Load() - sent; d != 1 {
		t.Errorf("A sent %d express datagrams for one packet, want 1", d)
	}
	if b.r.express.count.received.Load() == received {
		t.Error("B delivered the packet, but not from its express socket")
	}
	if got, want := fifoThreads(t), map[int]int{7: 1, 8: 1}; got[7] != want[7] || got[8] != want[8] || len(got) != len(want) {
		t.Errorf("SCHED_FIFO threads by priority %v, want %v (A's and B's outside express loops)", got, want)
	}
	if ra, rb := a.r.express.realtime.Load(), b.r.express.realtime.Load(); ra != 1 || rb != 1 {
		t.Errorf("express loops counted as real-time: A %d, B %d, want 1 each", ra, rb)
	}
	a.close(t)
	b.close(t)
	if ra, rb := a.r.express.realtime.Load(), b.r.express.realtime.Load(); ra != 0 || rb != 0 {
		t.Errorf("express loops counted as real-time after Run: A %d, B %d, want 0", ra, rb)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(fifoThreads(t)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("real-time threads left after the routers stopped: %v", fifoThreads(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSteeredLaneByte: with steering, a packet's lane byte is the
// kernel's lane of its connection (steer.Lane of steer.LaneHash), the
// same for the reply's header, so that the receiving gateway's lane and
// the lane its own steering program picks for the replies are one;
// without steering it stays the router's own.
func TestSteeredLaneByte(t *testing.T) {
	for _, steered := range []bool{true, false} {
		t.Run(map[bool]string{true: "steered", false: "not steered"}[steered], func(t *testing.T) {
			h, sb, p := newFQHotPair(t)
			h.a.express.steered = steered
			p.sparse = nil
			pA := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
			kpA := pA.current.Load()
			pA.laneSession.Store(laneTag(kpA))
			for f := range 8 {
				pkt := flowPacket(t, f, 0)
				feed(t, h.a, p, pkt)
				h.a.sealFQ(p)
				lh, ok := steer.LaneHash(pkt)
				if !ok {
					t.Fatal("flow packet not parsed")
				}
				reply := append([]byte(nil), pkt...)
				copy(reply[12:16], pkt[16:20])
				copy(reply[16:20], pkt[12:16])
				copy(reply[20:22], pkt[22:24])
				copy(reply[22:24], pkt[20:22])
				if rh, _ := steer.LaneHash(reply); rh != lh {
					t.Fatalf("flow %d: the reply's lane hash %#x differs from %#x", f, rh, lh)
				}
				want := byte(steer.Lane(lh))
				if !steered {
					want = laneByte(pA, kpA, testHash(h.a.flows, pkt), false)
				}
				if got := sb.captureBind.last[1]; got != want {
					t.Errorf("flow %d: lane byte %#x, want %#x", f, got, want)
				}
			}
		})
	}
}

// TestFQPipeSortsUnlessSteered: a lane's reader sorts flows itself only
// when the kernel does not.
func TestFQPipeSortsUnlessSteered(t *testing.T) {
	for _, steered := range []bool{false, true} {
		h := newHotPair(t, bhcrypto.AESGCM)
		h.a.express.steered = steered
		p, err := h.a.newFQPipe(h.a.lanes[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := p.sparse != nil; got == steered {
			t.Errorf("steered %v: reader sorts flows %v, want %v", steered, got, !steered)
		}
	}
}

// TestExpressConfigure: the express options New refuses.
func TestExpressConfigure(t *testing.T) {
	x, xt := new(udp.LinuxBind), tun.NewChannel("bh-x", 1420)
	for _, tc := range []struct {
		name string
		o    Options
		err  string
	}{
		{"none", Options{}, ""},
		{"priority", Options{Express: x, ExpressPriority: 10, ExpressKeepsP: true}, ""},
		{"steered", Options{Express: x, ExpressTUN: xt, ExpressSteered: true}, ""},
		{"negative priority", Options{ExpressPriority: -1}, "express priority -1"},
		{"priority over 99", Options{ExpressPriority: 100}, "express priority 100"},
		{"steered without a TUN queue", Options{Express: x, ExpressSteered: true}, "ExpressSteered needs"},
		{"keeping a P without a priority", Options{Express: x, ExpressKeepsP: true}, "ExpressKeepsP needs ExpressPriority"},
	} {
		var e expressPart
		err := e.configure(tc.o)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// TestKeepGate: an express loop keeps its P from when it sees a bulk
// lane busy until expressKeepFor has passed without seeing one again,
// and never without ExpressKeepsP.
func TestKeepGate(t *testing.T) {
	const s = int64(time.Second)
	type step struct {
		busy bool
		ns   int64
		want bool
	}
	for _, tc := range []struct {
		name  string
		on    bool
		steps []step
	}{
		{"off", false, []step{{true, 1, false}, {true, 2, false}}},
		{"quiet from the start", true, []step{{false, 1, false}, {false, 10 * s, false}}},
		{"busy, then quiet", true, []step{
			{false, 1, false}, {true, 2, true}, {false, 2 + s/2, true},
			{false, 2 + s - 1, true}, {false, 2 + s, false}, {false, 3 * s, false},
		}},
		{"busy again while kept", true, []step{
			{true, s, true}, {false, s + s/2, true}, {true, s + s/2 + 1, true}, {false, 2*s + s/2, true}, {false, 2*s + s/2 + 1, false},
		}},
	} {
		g := keepGate{on: tc.on}
		for i, st := range tc.steps {
			if got := g.keep(st.busy, st.ns); got != st.want {
				t.Errorf("%s: step %d (busy %v at %d ns): keep %v, want %v", tc.name, i, st.busy, st.ns, got, st.want)
			}
		}
	}
}

// TestBulkBusy: a bulk lane in the middle of a batch, inside or outside,
// makes the bulk lanes busy; the express lane's own batches do not.
func TestBulkBusy(t *testing.T) {
	r := &Router{lanes: []*lane{{health: new(loopHealth)}, {health: new(loopHealth)}}}
	r.express.lane = &lane{health: new(loopHealth), index: -1}
	if r.bulkBusy() {
		t.Fatal("busy with every loop waiting")
	}
	r.express.lane.health.outside.Store(5)
	if r.bulkBusy() {
		t.Error("busy with only the express lane at work")
	}
	for _, set := range []func(h *loopHealth){
		func(h *loopHealth) { h.inside.Store(7) },
		func(h *loopHealth) { h.outside.Store(7) },
	} {
		h := r.lanes[1].health
		set(h)
		if !r.bulkBusy() {
			t.Errorf("not busy with lane 1 at work: inside %d, outside %d", h.inside.Load(), h.outside.Load())
		}
		h.inside.Store(0)
		h.outside.Store(0)
	}
}
