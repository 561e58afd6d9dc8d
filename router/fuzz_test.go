package router

import (
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// FuzzReceive feeds arbitrary datagrams to the outside path of a gateway
// with a live session: it must never panic, and nothing that does not
// authenticate may reach the TUN.
func FuzzReceive(f *testing.F) {
	h := newHotPair(f, bhcrypto.AESGCM)
	in := h.a.newInsideBatch()
	h.a.routeBatch(refill(in, udpPacket(f, podA, podB, []byte("seed"))), 1, h.now)
	f.Add(append([]byte(nil), h.bindA.last[:h.bindA.n]...))
	f.Add([]byte{4, 0, 0, 0, 2, 0, 0, 0})
	f.Add(make([]byte, bhcrypto.InitiationSize))
	f.Add(append([]byte{1, 0, 0, 0}, make([]byte, bhcrypto.InitiationSize-4)...))
	f.Add(append([]byte{3, 0, 0, 0}, make([]byte, bhcrypto.CookieReplySize-4)...))
	out := h.b.newOutsideBatch()
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) > len(out.bufs[0]) {
			return
		}
		before := h.tunB.written
		out.sizes[0] = copy(out.bufs[0], msg)
		out.eps[0] = h.bindA.local
		h.b.receiveBatch(out, 1, h.now)
		// Only a correctly sealed message under B's key gets through;
		// the fuzzer cannot forge one, so a write means a bug, except
		// for the seeded genuine packet, which the replay window lets
		// through once.
		if h.tunB.written > before+1 {
			t.Fatalf("one datagram produced %d TUN writes", h.tunB.written-before)
		}
		for len(h.b.hs.queue) > 0 {
			h.b.hs.free <- <-h.b.hs.queue
		}
	})
}

// FuzzRoute feeds arbitrary packets to the inside path: it must never
// panic and never send more than one datagram per packet.
func FuzzRoute(f *testing.F) {
	h := newHotPair(f, bhcrypto.AESGCM)
	f.Add(udpPacket(f, podA, podB, []byte("v4")))
	f.Add(udpPacket(f, podA6, podB6, []byte("v6")))
	f.Add([]byte{0x45})
	f.Add([]byte{0x60, 0, 0, 0, 0xff, 0xff})
	in := h.a.newInsideBatch()
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) > h.a.set.mtu {
			return
		}
		before := h.bindA.sent
		h.a.routeBatch(refill(in, pkt), 1, h.now)
		if h.bindA.sent > before+1 {
			t.Fatalf("one packet produced %d datagrams", h.bindA.sent-before)
		}
	})
}
