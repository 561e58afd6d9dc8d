// Package udprr measures a UDP request/response exchange at a fixed
// rate between two pods of the lab, the way an API call, a DNS lookup or
// a health check crosses the tunnel: one small datagram out, one back,
// and the time between them.
//
// Both ends run inside the harness: the responder is a socket opened in
// the server pod's namespace, answered by a goroutine; the requester a
// socket in the client pod's namespace. A socket keeps the namespace it
// was created in, so only the creation needs setns (lab.InNetns).
package udprr

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/pace"
	"github.com/bridgehead/bridgehead/bench/internal/rxstamp"
)

// Result holds the round-trip times of one series.
type Result struct {
	Sent int
	// RTTs are the times of the responses received, in milliseconds,
	// until the requester's goroutine read them.
	RTTs []float64
	// KernelRTTs are the same responses' times until the kernel stamped
	// them on receipt (package rxstamp): without the requester's
	// scheduling delay. The responder's goroutine still runs in the
	// harness, so its delay stays in both.
	KernelRTTs []float64
}

// Lost is the number of requests without a response.
func (r Result) Lost() int { return r.Sent - len(r.RTTs) }

// Spec is one series: requests of Size bytes (at least 16) from Src in
// namespace ClientNS to Dst:Port in ServerNS, every Interval for Duration.
type Spec struct {
	ClientNS, ServerNS string
	Src, Dst           netip.Addr
	Port               int
	Size               int
	Interval, Duration time.Duration
}

// magic marks the harness's requests, so that a stray datagram is not
// answered or counted.
const magic = 0x62687272 // "bhrr"

// Run opens the responder, sends the series and waits up to a second for
// the last responses.
func Run(ctx context.Context, sp Spec) (Result, error) {
	if sp.Size < 16 || sp.Interval <= 0 {
		return Result{}, fmt.Errorf("udprr: size %d (min 16), interval %v", sp.Size, sp.Interval)
	}
	var srv, cli net.PacketConn
	err := lab.InNetns(sp.ServerNS, func() error {
		var err error
		srv, err = net.ListenPacket("udp4", netip.AddrPortFrom(sp.Dst, uint16(sp.Port)).String())
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("udprr responder in %s: %w", sp.ServerNS, err)
	}
	defer srv.Close()
	err = lab.InNetns(sp.ClientNS, func() error {
		var err error
		cli, err = net.ListenPacket("udp4", netip.AddrPortFrom(sp.Src, 0).String())
		if err != nil {
			return err
		}
		return rxstamp.Enable(cli.(*net.UDPConn))
	})
	if err != nil {
		return Result{}, fmt.Errorf("udprr requester in %s: %w", sp.ClientNS, err)
	}
	defer cli.Close()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); serve(srv) }()

	n := int(sp.Duration/sp.Interval) + 1
	sentAt := make([]time.Time, n)
	got := make([]bool, n)
	var mu sync.Mutex
	var rtts, krtts []float64
	go func() {
		defer wg.Done()
		buf, oob := make([]byte, 2048), make([]byte, rxstamp.OOBSize)
		for {
			k, oobn, _, _, err := cli.(*net.UDPConn).ReadMsgUDP(buf, oob)
			if err != nil {
				return
			}
			now := time.Now()
			at, serr := rxstamp.Parse(oob[:oobn])
			if serr != nil { // never seen: the socket asked for stamps
				at = now
			}
			if k < 16 || binary.BigEndian.Uint32(buf) != magic {
				continue
			}
			seq := binary.BigEndian.Uint64(buf[4:])
			mu.Lock()
			if seq < uint64(n) && !got[seq] && !sentAt[seq].IsZero() {
				got[seq] = true
				rtts = append(rtts, float64(now.Sub(sentAt[seq]).Nanoseconds())/1e6)
				krtts = append(krtts, float64(at.Sub(sentAt[seq]).Nanoseconds())/1e6)
			}
			mu.Unlock()
		}
	}()

	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(sp.Dst, uint16(sp.Port)))
	msg := make([]byte, sp.Size)
	binary.BigEndian.PutUint32(msg, magic)
	sent, werr := pace.Send(ctx, sp.Interval, func(seq int) bool { return seq < n }, func(seq int) error {
		binary.BigEndian.PutUint64(msg[4:], uint64(seq))
		mu.Lock()
		sentAt[seq] = time.Now()
		mu.Unlock()
		_, err := cli.WriteTo(msg, dst)
		return err
	})
	pace.Drain(ctx, &mu, func() bool { return len(rtts) == sent })
	cli.Close()
	srv.Close()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return Result{Sent: sent, RTTs: rtts, KernelRTTs: krtts}, werr
}

// serve answers every request of the harness with the same bytes until
// the socket is closed.
func serve(c net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		k, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		if k >= 16 && binary.BigEndian.Uint32(buf) == magic {
			c.WriteTo(buf[:k], from)
		}
	}
}
