package transit

import (
	"bytes"
	"net/netip"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// FuzzForward feeds arbitrary datagrams to a hub's forward path and a
// spoke's receive path. Neither may panic or touch bytes outside the
// message; a datagram the hub forwards keeps its relayed bytes, and
// whatever the hub forwards to E2 E2 unwraps to the same bytes.
func FuzzForward(f *testing.F) {
	w := newWorld(f, bhcrypto.ChaChaPoly)
	f.Add(w.wrap(f, gwE1, gwHub, gwE2, w.e2e[0], []byte("seed")))
	f.Add(w.wrap(f, gwE2, gwHub, gwE1, w.e2e[1], make([]byte, 64)))
	f.Add(w.wrap(f, gwX, gwHub, gwE2, w.e2e[0], nil))
	f.Add([]byte{bhcrypto.MsgRelay, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		// A fresh world per input would cost two handshakes per
		// gateway; the shared one only moves its replay windows.
		buf := make([]byte, len(msg), len(msg)+8)
		copy(buf, msg)
		tail := buf[len(msg) : len(msg)+8]
		copy(tail, "canary!!")
		res := w.relay[gwHub].Forward(buf)
		if !bytes.Equal(tail, []byte("canary!!")) {
			t.Fatal("Forward wrote past the message")
		}
		switch {
		case res.Reason == Forwarded:
			if len(res.Out) != len(msg) || !bytes.Equal(res.Out[bhcrypto.RelayHeaderSize:len(msg)-bhcrypto.TagSize], msg[bhcrypto.RelayHeaderSize:len(msg)-bhcrypto.TagSize]) {
				t.Fatal("the relayed datagram changed")
			}
			if dst, _ := w.plan.Lookup(keyIDAt(msg)); dst == gwE1 || dst == gwE2 {
				inner, from, via, r := w.relay[dst].Unwrap(res.Out)
				if r != Delivered || from != res.From || via != gwHub || !bytes.Equal(inner, msg[bhcrypto.RelayHeaderSize:len(msg)-bhcrypto.TagSize]) {
					t.Fatalf("unwrap of a forwarded datagram: %v from %d via %d", r, from, via)
				}
			}
		case res.Out != nil:
			t.Fatalf("%v with output", res.Reason)
		}
		if _, _, _, r := w.relay[gwE2].Unwrap(bytes.Clone(msg)); r == Forwarded {
			t.Fatal("Unwrap says forwarded")
		}
		for _, g := range []GatewayID{gwHub2, gwE1} {
			res := w.relay[g].Receive(bytes.Clone(msg))
			if (res.Reason == Forwarded) != (res.Out != nil) || (res.Reason == Delivered) != (res.Inner != nil) {
				t.Fatalf("Receive at %d: %v with out %d bytes, inner %d bytes", g, res.Reason, len(res.Out), len(res.Inner))
			}
		}
	})
}

func keyIDAt(msg []byte) bhcrypto.KeyID {
	var k bhcrypto.KeyID
	copy(k[:], msg[bhcrypto.TransportHeaderSize:bhcrypto.RelayHeaderSize])
	return k
}

// FuzzParseHint: parseHint never panics, accepts only a hint's length and
// type and a usable address, and what it accepts encodes back to itself.
func FuzzParseHint(f *testing.F) {
	for _, a := range []string{"198.51.100.7:51820", "[2001:db8::1]:4500", "10.0.0.1:1"} {
		body := make([]byte, hintLen)
		encodeHint(body, netip.MustParseAddrPort(a))
		f.Add(body)
	}
	f.Add(make([]byte, hintLen))
	f.Fuzz(func(t *testing.T, inner []byte) {
		ap, ok := parseHint(inner)
		if !ok {
			return
		}
		if len(inner) != hintLen || inner[0] != msgHint || !ap.IsValid() {
			t.Fatalf("accepted %x as %v", inner, ap)
		}
		if _, pseudo := PseudoGateway(ap); pseudo {
			t.Fatalf("accepted a pseudo endpoint %v", ap)
		}
		body := make([]byte, hintLen)
		encodeHint(body, ap)
		if back, ok := parseHint(body); !ok || back != ap {
			t.Fatalf("%v encodes to %x, which parses as %v, %v", ap, body, back, ok)
		}
	})
}

// FuzzCandidateRewrite: whatever arrives straight from a candidate
// address (a hinted mapping) or from a directly reached gateway, the
// router sees it at a stand-in only when it is a transport message of
// our session with that very gateway (directFrom), never by its source
// address alone.
func FuzzCandidateRewrite(f *testing.F) {
	w, net, binds := bindWorld(f)
	mapping := netip.MustParseAddrPort("203.0.113.7:40000")
	kp, _, _ := w.sess[gwHub].Current(gwE1)
	hint, ok := hintMessage(kp, w.plan.KeyID(gwE2), mapping)
	if !ok {
		f.Fatal("hint not sealed")
	}
	net.q[addr(gwE1)] = append(net.q[addr(gwE1)], fakeDatagram{hint, addr(gwHub)})
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes, eps := make([]int, 8), make([]netip.AddrPort, 8)
	if _, err := binds[gwE1].Receive(bufs, sizes, eps); err != nil {
		f.Fatal(err)
	}
	seal := func(kp *bhcrypto.Keypair) []byte {
		buf := make([]byte, bhcrypto.TransportOverhead+16)
		m, err := kp.Seal(buf, 16)
		if err != nil {
			f.Fatal(err)
		}
		return m
	}
	hub2, _, _ := w.sess[gwHub2].Current(gwE1)
	f.Add(seal(w.e2e[1]), false)
	f.Add(seal(hub2), false)
	f.Add(seal(hub2), true)
	f.Add([]byte{bhcrypto.MsgInitiation, 0, 0, 0}, false)
	f.Fuzz(func(t *testing.T, msg []byte, fromHub2 bool) {
		if len(msg) == 0 || len(msg) > 1500 || msg[0] == bhcrypto.MsgRelay {
			return // relay messages are the relay's own tests'
		}
		from := mapping
		if fromHub2 {
			from = addr(gwHub2)
		}
		net.mu.Lock()
		net.q[addr(gwE1)] = append(net.q[addr(gwE1)], fakeDatagram{bytes.Clone(msg), from})
		net.mu.Unlock()
		n, err := binds[gwE1].Receive(bufs, sizes, eps)
		if err != nil || n != 1 {
			t.Fatalf("%d datagrams (%v), want the one sent", n, err)
		}
		gw, standIn := PseudoGateway(eps[0])
		if !standIn {
			if eps[0] != from {
				t.Fatalf("reported from %v, sent from %v", eps[0], from)
			}
			return
		}
		rcv, _, ok := bhcrypto.ParseTransportHeader(bufs[0][:sizes[0]])
		if !ok {
			t.Fatalf("a non-transport datagram reported at stand-in %v", eps[0])
		}
		if _, opened, ok := binds[gwE1].sess.Session(rcv); !ok || opened != gw || from != mapping {
			t.Fatalf("reported at %v's stand-in from %v on session of %v (%v)", gw, from, opened, ok)
		}
	})
}
