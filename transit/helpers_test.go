package transit

import (
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Gateways of the test catalog: a hub site "aks" with two gateways, two
// edge sites that relay through it, and a site "x" that relays through
// nothing.
const (
	gwHub GatewayID = iota
	gwHub2
	gwE1
	gwE2
	gwX
	numTestGateways
)

var testNow = time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)

// testIdentity is a deterministic identity: private key bytes all seed.
func testIdentity(t testing.TB, seed byte, kind bhcrypto.CipherKind) *bhcrypto.Identity {
	t.Helper()
	var priv bhcrypto.PrivateKey
	for i := range priv {
		priv[i] = seed
	}
	priv[0] &= 248
	priv[31] = priv[31]&127 | 64
	return bhcrypto.NewIdentity(priv, kind, bhcrypto.Prologue("transit-test"))
}

// handshake runs a real Noise IK handshake between a (initiator, index
// ia) and b (index ib) and returns both keypairs.
func handshake(t testing.TB, a, b *bhcrypto.Identity, ia, ib uint32) (*bhcrypto.Keypair, *bhcrypto.Keypair) {
	t.Helper()
	in, m1, err := a.CreateInitiation(b.Public, ia, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(m1)
	if err != nil {
		t.Fatal(err)
	}
	kb, m2, err := b.CreateResponse(ri, ib, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := in.ConsumeResponse(m2, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return ka, kb
}

// fakeSessions is one gateway's sessions, as the router would provide
// them.
type fakeSessions struct {
	byIndex map[uint32]sessionEntry
	current map[GatewayID]sessionEntry
}

type sessionEntry struct {
	kp *bhcrypto.Keypair
	gw GatewayID
	to netip.AddrPort
}

func newFakeSessions() *fakeSessions {
	return &fakeSessions{byIndex: map[uint32]sessionEntry{}, current: map[GatewayID]sessionEntry{}}
}

func (s *fakeSessions) add(kp *bhcrypto.Keypair, gw GatewayID, to netip.AddrPort) {
	e := sessionEntry{kp, gw, to}
	s.byIndex[kp.LocalIndex] = e
	s.current[gw] = e
}

func (s *fakeSessions) Session(index uint32) (*bhcrypto.Keypair, GatewayID, bool) {
	e, ok := s.byIndex[index]
	return e.kp, e.gw, ok
}

func (s *fakeSessions) Current(gw GatewayID) (*bhcrypto.Keypair, netip.AddrPort, bool) {
	e, ok := s.current[gw]
	return e.kp, e.to, ok
}

// world is the test catalog with every gateway's Relay and sessions: each
// edge gateway and x have a session with both hub gateways, and E1 and
// E2 one with each other (end to end).
type world struct {
	plan  *Plan
	ids   [numTestGateways]*bhcrypto.Identity
	sess  [numTestGateways]*fakeSessions
	relay [numTestGateways]*Relay
	// e2e are E1's and E2's keypairs of their end-to-end session.
	e2e [2]*bhcrypto.Keypair
	// With Binds (bindWorld): the gateways each gateway sees down, and
	// the relay messages it sent through each hub gateway.
	down    [numTestGateways]map[GatewayID]bool
	relayed [numTestGateways]map[GatewayID]uint64
}

func addr(gw GatewayID) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + gw)}), 51820)
}

func newWorld(t testing.TB, kind bhcrypto.CipherKind) *world {
	t.Helper()
	w := &world{}
	sites := [numTestGateways]string{"aks", "aks", "e1", "e2", "x"}
	var gws []Gateway
	for g := range numTestGateways {
		w.ids[g] = testIdentity(t, byte(g+1), kind)
		gws = append(gws, Gateway{Site: sites[g], Name: "gw" + string(rune('0'+g)), Key: w.ids[g].Public})
		w.sess[g] = newFakeSessions()
	}
	plan, err := NewPlan(gws, map[string][]string{"e1": {"aks"}, "e2": {"aks"}})
	if err != nil {
		t.Fatal(err)
	}
	w.plan = plan
	index := uint32(0x100)
	connect := func(a, b GatewayID) (*bhcrypto.Keypair, *bhcrypto.Keypair) {
		index += 2
		ka, kb := handshake(t, w.ids[a], w.ids[b], index, index+1)
		w.sess[a].add(ka, b, addr(b))
		w.sess[b].add(kb, a, addr(a))
		return ka, kb
	}
	for _, spoke := range []GatewayID{gwE1, gwE2, gwX} {
		connect(spoke, gwHub)
		connect(spoke, gwHub2)
	}
	w.e2e[0], w.e2e[1] = connect(gwE1, gwE2)
	for g := range numTestGateways {
		r, err := New(w.sess[g], nil)
		if err != nil {
			t.Fatal(err)
		}
		r.SetPlan(plan, g)
		w.relay[g] = r
	}
	return w
}

// hubSession is spoke's keypair of its session with hub.
func (w *world) hubSession(spoke, hub GatewayID) *bhcrypto.Keypair {
	kp, _, _ := w.sess[spoke].Current(hub)
	return kp
}

// sealInner seals payload with kp as a transport message placed after
// room for a relay header, as a spoke does before Wrap. It returns the
// buffer and the datagram's length.
func sealInner(t testing.TB, kp *bhcrypto.Keypair, payload []byte) ([]byte, int) {
	t.Helper()
	buf := make([]byte, bhcrypto.RelayOverhead+bhcrypto.TransportOverhead+len(payload))
	copy(buf[bhcrypto.RelayHeaderSize+bhcrypto.TransportHeaderSize:], payload)
	pkt, err := kp.Seal(buf[bhcrypto.RelayHeaderSize:], len(payload))
	if err != nil {
		t.Fatal(err)
	}
	return buf, len(pkt)
}

// wrap is src's relay message for dst through hub, carrying payload
// sealed end to end with kp.
func (w *world) wrap(t testing.TB, src, hub, dst GatewayID, kp *bhcrypto.Keypair, payload []byte) []byte {
	t.Helper()
	buf, n := sealInner(t, kp, payload)
	msg, err := w.relay[src].Wrap(buf, n, w.hubSession(src, hub), dst)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}
