//go:build linux

package udp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestListenLanesSpreadsSources opens four sockets on one port, sends from
// 64 source ports and checks that every socket receives, that each source
// port's datagrams all reach one socket, and that nothing is lost.
func TestListenLanesSpreadsSources(t *testing.T) {
	const lanes, sources, perSource = 4, 64, 8
	binds, err := ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), lanes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	port := binds[0].LocalAddr().Port()
	for i, b := range binds {
		if b.LocalAddr().Port() != port {
			t.Fatalf("socket %d on port %d, want %d", i, b.LocalAddr().Port(), port)
		}
	}
	var mu sync.Mutex
	seen := make([]map[uint16]int, lanes) // per socket: source port -> datagrams
	var wg sync.WaitGroup
	for l, b := range binds {
		seen[l] = map[uint16]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs, sizes, eps := make([][]byte, 8), make([]int, 8), make([]netip.AddrPort, 8)
			for i := range bufs {
				bufs[i] = make([]byte, 64)
			}
			for {
				n, err := b.Receive(bufs, sizes, eps)
				if err != nil {
					return
				}
				mu.Lock()
				for i := range n {
					seen[l][eps[i].Port()]++
				}
				mu.Unlock()
			}
		}()
	}
	defer func() {
		for _, b := range binds {
			b.Close()
		}
		wg.Wait()
	}()

	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)}
	msg := make([]byte, 16)
	for range sources {
		c, err := net.DialUDP("udp4", nil, dst)
		if err != nil {
			t.Fatal(err)
		}
		for i := range perSource {
			binary.BigEndian.PutUint32(msg, uint32(i))
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	count := func() (total int, per []int, split []uint16) {
		mu.Lock()
		defer mu.Unlock()
		per = make([]int, lanes)
		on := map[uint16]int{}
		for l := range seen {
			for p, c := range seen[l] {
				if prev, ok := on[p]; ok && prev != l {
					split = append(split, p)
				}
				on[p] = l
				per[l] += c
				total += c
			}
		}
		return total, per, split
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if total, _, _ := count(); total >= sources*perSource || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	total, per, split := count()
	t.Logf("datagrams per socket: %v", per)
	if total != sources*perSource {
		t.Errorf("received %d datagrams, want %d", total, sources*perSource)
	}
	if len(split) > 0 {
		t.Errorf("source ports split over sockets: %v", split)
	}
	for l, c := range per {
		if c == 0 {
			t.Errorf("socket %d received nothing from %d source ports", l, sources)
		}
	}
}

func TestListenLanesErrors(t *testing.T) {
	for _, n := range []int{0, -2, MaxLanes + 1} {
		if _, err := ListenLanes(netip.MustParseAddrPort("127.0.0.1:0"), n, Options{}); err == nil {
			t.Errorf("%d sockets: no error", n)
		}
	}
	// A port held without SO_REUSEPORT cannot be joined; nothing leaks.
	b, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := ListenLanes(b.LocalAddr(), 2, Options{}); err == nil {
		t.Error("joined a port bound without SO_REUSEPORT")
	}
}
