package router

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// scriptedTUN is a Channel whose reads return at most script[i] packets
// for the i-th read (cycling), so a test decides which reads are single
// packets (queued for the sealer) and which are batches (sealed by the
// reader).
type scriptedTUN struct {
	*tun.Channel
	script []int
	reads  atomic.Int64
}

func (s *scriptedTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	i := s.reads.Add(1) - 1
	k := min(s.script[int(i)%len(s.script)], len(bufs))
	return s.Channel.Read(bufs[:k], sizes[:k], offset)
}

// TestInsideOrderAcrossReaderAndSealer: with reads of one packet queued for
// the sealer goroutine and reads of several sealed by the reader itself,
// in any interleaving, packets leave in the order they were read.
func TestInsideOrderAcrossReaderAndSealer(t *testing.T) {
	clock := newFakeClock() // never advances: no read counts as after a quiet spell
	st := &scriptedTUN{Channel: tun.NewChannelBatch("bh-a", 1420, 16), script: []int{1, 1, 1, 5, 1, 2, 1, 1, 8, 1, 3, 16}}
	a := &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: st.Channel, clock: clock}
	b := &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: tun.NewChannel("bh-b", 1420), clock: clock}
	a.bind, b.bind = udp.NewPair(netip.MustParseAddrPort("192.0.2.1:51820"), netip.MustParseAddrPort("192.0.2.2:51820"))
	a.dev = st
	cfgA := twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfgB := twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	a.start(t, cfgA)
	b.start(t, cfgB)
	pkt := func(i int) []byte {
		var p [4]byte
		binary.BigEndian.PutUint32(p[:], uint32(i))
		return udpPacket(t, podA, podB, p[:])
	}
	// The first packet sets the session up.
	if err := a.tun.Inject(pkt(0)); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
	const n = 3000
	go func() {
		for i := 1; i <= n; i++ {
			if err := a.tun.Inject(pkt(i)); err != nil {
				return
			}
		}
	}()
	for i := 1; i <= n; i++ {
		got := b.expectPacket(t)
		want := pkt(i)
		if string(got) != string(want) {
			t.Fatalf("packet %d: got % x, want % x (reordered or changed)", i, got[len(got)-4:], want[len(want)-4:])
		}
	}
	if r := st.reads.Load(); r < 100 {
		t.Errorf("only %d reads; the script did not run", r)
	}
}
