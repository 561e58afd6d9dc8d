//go:build linux

package earlydrop

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/udp"
)

// TestAttachLanes: one filter attached to every socket of a port
// (udp.ListenLanes) drops garbage whichever socket the kernel picks, and
// lets the rest through on each of them.
func TestAttachLanes(t *testing.T) {
	needRoot(t)
	const lanes, sources = 4, 32
	binds, err := udp.ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), lanes, udp.Options{DisableOffload: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Attach(binds[0], binds[1], binds[2], binds[3])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	to := net.UDPAddrFromAddrPort(binds[0].LocalAddr())
	for i := range sources {
		c, err := net.DialUDP("udp4", nil, to)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(transport(0xdecaf, 100)) // unknown index: dropped
		c.Write(marker(i))               // passes
		c.Close()
	}
	var mu sync.Mutex
	got, per := 0, make([]int, lanes)
	var wg sync.WaitGroup
	for l, b := range binds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs, sizes, eps := [][]byte{make([]byte, 2048)}, []int{0}, []netip.AddrPort{{}}
			for {
				n, err := b.Receive(bufs, sizes, eps)
				if err != nil {
					return
				}
				mu.Lock()
				if n == 1 && bufs[0][0] != bhcrypto.MsgCookieReply {
					t.Errorf("socket %d received a datagram of type %d", l, bufs[0][0])
				}
				got += n
				per[l] += n
				mu.Unlock()
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		done := got >= sources
		mu.Unlock()
		if done {
			break
		}
	}
	time.Sleep(50 * time.Millisecond) // anything that should not arrive
	if err := f.Detach(); err != nil || f.Attached() {
		t.Errorf("detach: %v, attached %v", err, f.Attached())
	}
	for _, b := range binds {
		b.Close()
	}
	wg.Wait()
	if got != sources {
		t.Errorf("%d markers arrived, want %d (per socket %v)", got, sources, per)
	}
	t.Logf("markers per socket: %v", per)
	if c, err := f.Counts(); err != nil || c[ReasonUnknownIndex] != sources {
		t.Errorf("unknown-index drops %d (%v), want %d", c[ReasonUnknownIndex], err, sources)
	}
}
