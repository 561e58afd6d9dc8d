//go:build linux

package router

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// genTUN is a lane's TUN on the sending router of BenchmarkLanesRouters:
// once start is closed, every Read returns a batch of copies of pkt, each
// the next of flows inner flows (UDP source port base+i). Writes are
// discarded. One per lane: Read is not safe for concurrent use.
type genTUN struct {
	pkt         []byte
	base, flows uint16
	next        uint16
	start       <-chan struct{}
	closed      chan struct{}
	once        sync.Once
}

func (d *genTUN) Read(bufs [][]byte, sizes []int, off int) (int, error) {
	select {
	case <-d.start:
	case <-d.closed:
		return 0, tun.ErrClosed
	}
	select {
	case <-d.closed:
		return 0, tun.ErrClosed
	default:
	}
	n := min(len(bufs), 32)
	for i := range n {
		sizes[i] = copy(bufs[i][off:], d.pkt)
		binary.BigEndian.PutUint16(bufs[i][off+20:], d.base+d.next)
		d.next = (d.next + 1) % d.flows
	}
	return n, nil
}
func (d *genTUN) Write(bufs [][]byte, _ int) (int, error) { return len(bufs), nil }
func (d *genTUN) BatchSize() int                          { return 64 }
func (d *genTUN) MTU() int                                { return 1420 }
func (d *genTUN) Name() string                            { return "gen" }
func (d *genTUN) Close() error                            { d.once.Do(func() { close(d.closed) }); return nil }

// sinkTUN is a lane's TUN on the receiving router: it counts the packets
// written to it (own) and to all lanes (total), and closes done once total
// reaches target. Read blocks until Close.
type sinkTUN struct {
	own    atomic.Uint64
	total  *atomic.Uint64
	target uint64
	done   chan struct{}
	doneMu *sync.Once
	closed chan struct{}
	once   sync.Once
}

func (d *sinkTUN) Read([][]byte, []int, int) (int, error) {
	<-d.closed
	return 0, tun.ErrClosed
}
func (d *sinkTUN) Write(bufs [][]byte, _ int) (int, error) {
	d.own.Add(uint64(len(bufs)))
	if d.total.Add(uint64(len(bufs))) >= d.target {
		d.doneMu.Do(func() { close(d.done) })
	}
	return len(bufs), nil
}
func (d *sinkTUN) BatchSize() int { return 64 }
func (d *sinkTUN) MTU() int       { return 1420 }
func (d *sinkTUN) Name() string   { return "sink" }
func (d *sinkTUN) Close() error   { d.once.Do(func() { close(d.closed) }); return nil }

// benchmarkLanesRouters runs two Routers with lanesA and lanesB lanes on real
// loopback sockets (udp.ListenLanes, so the kernel steers B's datagrams)
// and measures what B delivers of 1420-byte packets of 64 flows that A's
// lanes read as fast as they can. oldB makes B a gateway that predates
// lane bytes (A then sends none and B's kernel hashes the pair to one
// socket).
func benchmarkLanesRouters(b *testing.B, lanesA, lanesB int, oldB bool) {
	const size, flows = 1420, 64
	pkt := udpPacket(b, podA, podB, make([]byte, size-28))
	idA, idB := newIdentity(b, bhcrypto.AESGCM), newIdentity(b, bhcrypto.AESGCM)
	bindsA, err := udp.ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), lanesA, udp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	bindsB, err := udp.ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), lanesB, udp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	start := make(chan struct{})
	var total atomic.Uint64
	done, doneOnce := make(chan struct{}), new(sync.Once)
	var gens []*genTUN
	var sinks []*sinkTUN
	var extraA, extraB []Lane
	for i := range lanesA {
		g := &genTUN{pkt: pkt, base: uint16(10000 + i*flows), flows: flows, start: start, closed: make(chan struct{})}
		gens = append(gens, g)
		if i > 0 {
			extraA = append(extraA, Lane{TUN: g, Bind: bindsA[i]})
		}
	}
	for i := range lanesB {
		s := &sinkTUN{total: &total, target: uint64(b.N), done: done, doneMu: doneOnce, closed: make(chan struct{})}
		sinks = append(sinks, s)
		if i > 0 {
			extraB = append(extraB, Lane{TUN: s, Bind: bindsB[i]})
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ra, err := New(Options{TUN: gens[0], Bind: bindsA[0], Identity: idA, Lanes: extraA, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	rb, err := New(Options{TUN: sinks[0], Bind: bindsB[0], Identity: idB, Lanes: extraB, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	rb.set.noLaneBytes = oldB
	epA, epB := bindsA[0].LocalAddr(), bindsB[0].LocalAddr()
	if err := ra.SetConfig(twoSiteConfig("site-a", idA.Public, idB.Public, epA, epB)); err != nil {
		b.Fatal(err)
	}
	if err := rb.SetConfig(twoSiteConfig("site-b", idA.Public, idB.Public, epA, epB)); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range []*Router{ra, rb} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	// Sessions both ways, and (unless B is old) A knows B reads lane bytes.
	pA := ra.state.Load().peers[idB.Public]
	deadline := time.Now().Add(10 * time.Second)
	for {
		kp := pA.current.Load()
		if kp != nil && (oldB || pA.laneSession.Load() == laneTag(kp)) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no session (with lane bytes) from A to B")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sentBefore := pA.txPackets.Load()
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	close(start)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("B delivered %d of %d packets", total.Load(), b.N)
	}
	b.StopTimer()
	most := uint64(0)
	for _, s := range sinks {
		most = max(most, s.own.Load())
	}
	b.ReportMetric(float64(most)/float64(total.Load()), "busiest-lane-share")
	b.ReportMetric(float64(pA.txPackets.Load()-sentBefore)/float64(b.N), "sent/delivered")
	b.ReportMetric(float64(rb.drops.Get(Outside, ReasonReplay))/float64(b.N), "replay-drops/op")
}

// BenchmarkLanesRouters: two Routers on loopback, 1 and 2 lanes each, B
// new (steered by lane byte) and old (hashed by the pair's ports), and A
// with 1 lane sending to B with 2 (B's spread without A's lanes). Run
// with -cpu 1,2:
//
//	go test -run '^$' -bench BenchmarkLanesRouters -cpu 1,2 -count 3 -benchtime 200000x ./router/
func BenchmarkLanesRouters(b *testing.B) {
	for _, tc := range []struct {
		a, b int
		oldB bool
	}{{1, 1, false}, {2, 2, false}, {2, 2, true}, {1, 2, false}} {
		name := fmt.Sprintf("lanes=%d", tc.a)
		if tc.b != tc.a {
			name = fmt.Sprintf("lanes=%d-to-%d", tc.a, tc.b)
		}
		if tc.oldB {
			name += "/old-receiver"
		}
		b.Run(name, func(b *testing.B) { benchmarkLanesRouters(b, tc.a, tc.b, tc.oldB) })
	}
}
