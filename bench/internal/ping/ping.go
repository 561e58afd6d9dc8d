// Package ping measures ICMP round-trip times through the benchmark's
// network at a short interval, so that a few seconds give enough samples
// for a 99th percentile (what bhprobe ping lacks for a benchmark).
package ping

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/pace"
	"github.com/bridgehead/bridgehead/bench/internal/rxstamp"
	"github.com/bridgehead/bridgehead/packet"
)

// Result holds the round-trip times of one ping series.
type Result struct {
	Sent int
	// RTTs are the times of the replies received, in milliseconds, until
	// the pinger's goroutine read them.
	RTTs []float64
	// KernelRTTs are the same replies' times until the kernel stamped
	// them on receipt (package rxstamp): without the harness's own
	// scheduling delay. Both end at the same replies, in the same order.
	KernelRTTs []float64
}

// Lost is the number of requests without a reply.
func (p Result) Lost() int { return p.Sent - len(p.RTTs) }

// Run sends ICMP echo requests from src (an IPv4 address of namespace ns)
// to dst every interval for dur, then waits up to a second for the last
// replies. It implements what bhprobe ping lacks for a benchmark: a short
// interval, so that a few seconds give enough samples for a 99th
// percentile.
func Run(ctx context.Context, ns string, src, dst netip.Addr, interval, dur time.Duration) (Result, error) {
	var conn net.PacketConn
	err := lab.InNetns(ns, func() error {
		var err error
		conn, err = net.ListenPacket("ip4:icmp", src.String())
		if err != nil {
			return err
		}
		return rxstamp.Enable(conn.(*net.IPConn))
	})
	if err != nil {
		return Result{}, fmt.Errorf("ping in %s: %w", ns, err)
	}
	defer conn.Close()

	id := uint16(rand.Uint32())
	var mu sync.Mutex
	sentAt := map[uint16]time.Time{}
	var rtts, krtts []float64

	done := make(chan struct{})
	go func() {
		defer close(done)
		buf, oob := make([]byte, 1500), make([]byte, rxstamp.OOBSize)
		for {
			n, oobn, _, _, err := conn.(*net.IPConn).ReadMsgIP(buf, oob)
			if err != nil {
				return
			}
			now := time.Now()
			at, serr := rxstamp.Parse(oob[:oobn])
			// ReadMsgIP, unlike ReadFrom, leaves the IPv4 header on.
			msg, ok := icmpOf(buf[:n])
			if !ok || len(msg) < 8 || msg[0] != 0 || binary.BigEndian.Uint16(msg[4:]) != id {
				continue
			}
			seq := binary.BigEndian.Uint16(msg[6:])
			mu.Lock()
			if t, ok := sentAt[seq]; ok {
				rtts = append(rtts, float64(now.Sub(t).Nanoseconds())/1e6)
				if serr != nil { // never seen: the socket asked for stamps
					at = now
				}
				krtts = append(krtts, float64(at.Sub(t).Nanoseconds())/1e6)
				delete(sentAt, seq)
			}
			mu.Unlock()
		}
	}()

	dstAddr := &net.IPAddr{IP: dst.AsSlice()}
	end := time.Now().Add(dur)
	sent, werr := pace.Send(ctx, interval, func(int) bool { return time.Now().Before(end) }, func(i int) error {
		seq := uint16(i + 1)
		msg := EchoRequest(id, seq, 56)
		mu.Lock()
		sentAt[seq] = time.Now()
		mu.Unlock()
		_, err := conn.WriteTo(msg, dstAddr)
		return err
	})
	// Wait for stragglers, less once all have come back.
	pace.Drain(ctx, &mu, func() bool { return len(sentAt) == 0 })
	conn.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	return Result{Sent: sent, RTTs: rtts, KernelRTTs: krtts}, werr
}

// icmpOf is the ICMP message of an IPv4 packet read from a raw socket.
func icmpOf(pkt []byte) ([]byte, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return nil, false
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl {
		return nil, false
	}
	return pkt[ihl:], true
}

// EchoRequest is an ICMPv4 echo request message with size payload bytes.
func EchoRequest(id, seq uint16, size int) []byte {
	b := make([]byte, 8+size)
	b[0] = 8 // echo request
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	for i := range size {
		b[8+i] = byte(i)
	}
	binary.BigEndian.PutUint16(b[2:], packet.Checksum(b, 0))
	return b
}
