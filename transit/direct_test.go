package transit

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// fakeClock is a settable clock for the relays' direct paths.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// queued returns how many datagrams wait at addr.
func queued(net *fakeNet, addr netip.AddrPort) int {
	net.mu.Lock()
	defer net.mu.Unlock()
	return len(net.q[addr])
}

// TestDirectPath: the hub tells E1 and E2 each other's address while it
// relays for them; their probes go straight there and, once one is
// answered, E1's datagrams for E2 go straight too, unwrapped, and reach
// E2's router from E1's pseudo endpoint. When a probe stays unanswered
// for DirectTimeout they go through the hub again, until an answer.
func TestDirectPath(t *testing.T) {
	w, net, binds := bindWorld(t)
	clock := &fakeClock{t: testNow}
	for g := range numTestGateways {
		w.relay[g].now, w.relay[g].epoch = clock.now, clock.now()
	}
	buf, n := sealInner(t, w.e2e[0], []byte("pod e1 to pod e2"))
	datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	e2 := PseudoEndpoint(gwE2)
	send := func() {
		t.Helper()
		if err := binds[gwE1].SendFlows([][]byte{datagram}, []uint64{1}, e2); err != nil {
			t.Fatal(err)
		}
	}
	hubs := func() int { return queued(net, addr(gwHub)) + queued(net, addr(gwHub2)) }

	// Through the hub: it forwards, and hints both ends.
	send()
	if hubs() != 1 {
		t.Fatalf("%d datagrams at the hubs, want 1", hubs())
	}
	for _, h := range []GatewayID{gwHub, gwHub2} {
		receiveAll(t, binds[h])
	}
	if got, _ := receiveAll(t, binds[gwE1]); len(got) != 0 {
		t.Fatalf("E1's router got %d datagrams from the hint", len(got))
	}
	got, eps := receiveAll(t, binds[gwE2])
	if len(got) != 1 || eps[0] != PseudoEndpoint(gwE1) {
		t.Fatalf("E2 got %d datagrams from %v, want the relayed one", len(got), eps)
	}
	if c := w.relay[gwE2].Counts().Get(Control); c != 1 {
		t.Fatalf("E2 kept %d control messages, want the hint", c)
	}

	// E1 knows E2's address: a probe goes there, the data still through
	// the hub until the probe is answered.
	send()
	if hubs() != 1 || queued(net, addr(gwE2)) != 1 {
		t.Fatalf("after the hint: %d at the hubs, %d straight at E2; want 1 and the probe", hubs(), queued(net, addr(gwE2)))
	}
	if got, _ := receiveAll(t, binds[gwE2]); len(got) != 0 {
		t.Fatalf("E2's router got the probe")
	}
	if _, ok := binds[gwE1].Direct(e2); ok {
		t.Fatal("direct before an answer")
	}
	if got, _ := receiveAll(t, binds[gwE1]); len(got) != 0 {
		t.Fatalf("E1's router got the probe's reply")
	}
	to, ok := binds[gwE1].Direct(e2)
	if !ok || to != addr(gwE2) {
		t.Fatalf("Direct = %v, %v; want %v", to, ok, addr(gwE2))
	}
	if via, relayed := binds[gwE1].Via(e2); !relayed || len(via) == 0 {
		t.Fatalf("Via = %v, %v", via, relayed)
	}
	net.mu.Lock()
	clear(net.q)
	net.mu.Unlock()

	// Direct: unwrapped, straight to E2, from E1's pseudo endpoint there.
	clock.t = clock.t.Add(DirectProbeInterval / 2)
	send()
	if hubs() != 0 || queued(net, addr(gwE2)) != 1 {
		t.Fatalf("direct: %d at the hubs, %d at E2", hubs(), queued(net, addr(gwE2)))
	}
	got, eps = receiveAll(t, binds[gwE2])
	if len(got) != 1 || !bytes.Equal(got[0], datagram) || eps[0] != PseudoEndpoint(gwE1) {
		t.Fatalf("E2 got %d datagrams from %v, want the datagram from E1's pseudo endpoint", len(got), eps)
	}

	// Idle for longer than DirectTimeout: still direct.
	clock.t = clock.t.Add(2 * DirectTimeout)
	if _, ok := binds[gwE1].Direct(e2); !ok {
		t.Fatal("an idle direct path was given up")
	}
	// A probe unanswered for DirectTimeout: back through the hub, still
	// probing.
	send() // direct, with a probe
	if hubs() != 0 || queued(net, addr(gwE2)) != 2 {
		t.Fatalf("direct with a probe: %d at the hubs, %d at E2", hubs(), queued(net, addr(gwE2)))
	}
	net.mu.Lock()
	clear(net.q)
	net.mu.Unlock()
	clock.t = clock.t.Add(DirectTimeout + time.Millisecond)
	send()
	if hubs() != 1 || queued(net, addr(gwE2)) != 1 {
		t.Fatalf("after the timeout: %d at the hubs, %d at E2 (the probe)", hubs(), queued(net, addr(gwE2)))
	}
	if _, ok := binds[gwE1].Direct(e2); ok {
		t.Fatal("still direct after the timeout")
	}
	// The answer brings it back.
	receiveAll(t, binds[gwE2])
	receiveAll(t, binds[gwE1])
	if _, ok := binds[gwE1].Direct(e2); !ok {
		t.Fatal("not direct again after an answer")
	}
}

// TestHubForwardsOnlyNoise: a spoke cannot make a hub pass a hint or a
// probe on as its own; the hub forwards only the end-to-end protocol.
func TestHubForwardsOnlyNoise(t *testing.T) {
	w := newWorld(t, bhcrypto.AESGCM)
	wrap := func(typ byte) []byte {
		buf := make([]byte, bhcrypto.RelayOverhead+hintLen)
		buf[bhcrypto.RelayHeaderSize] = typ
		msg, err := w.relay[gwE1].Wrap(buf, hintLen, w.hubSession(gwE1, gwHub), gwE2)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	for _, typ := range []byte{msgHint, msgProbe, msgProbeReply, 0, 9} {
		if res := w.relay[gwHub].Receive(wrap(typ)); res.Reason != ReasonMalformed {
			t.Errorf("type %#x: hub says %v", typ, res.Reason)
		}
		if res := w.relay[gwHub].Forward(wrap(typ)); res.Reason != ReasonMalformed {
			t.Errorf("type %#x: Forward says %v", typ, res.Reason)
		}
	}
}

func TestParseHint(t *testing.T) {
	w := newWorld(t, bhcrypto.AESGCM)
	for _, tc := range []struct {
		addr netip.AddrPort
		ok   bool
	}{
		{netip.MustParseAddrPort("203.0.113.12:40000"), true},
		{netip.MustParseAddrPort("[2001:db8::1]:51820"), true},
		{netip.MustParseAddrPort("192.168.1.2:51820"), true},
		{PseudoEndpoint(3), false},
		{netip.MustParseAddrPort("127.0.0.1:51820"), false},
		{netip.MustParseAddrPort("0.0.0.0:51820"), false},
	} {
		msg, ok := hintMessage(w.hubSession(gwE1, gwHub), w.plan.KeyID(gwE2), tc.addr)
		if !ok {
			t.Fatal("hint not sealed")
		}
		got, ok := parseHint(msg[bhcrypto.RelayHeaderSize : len(msg)-bhcrypto.TagSize])
		if ok != tc.ok || ok && got != tc.addr {
			t.Errorf("%v: parsed %v, %v", tc.addr, got, ok)
		}
	}
}

// TestDirectPathSurvivesReload: a new Plan (a reload) keeps the direct
// path to a gateway with the same key in the same site, even when its id
// changes; a gateway whose key changed starts over through the hub.
func TestDirectPathSurvivesReload(t *testing.T) {
	w, _, binds := bindWorld(t)
	buf, n := sealInner(t, w.e2e[0], []byte("pod e1 to pod e2"))
	datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	for range 2 { // hint, then probe and answer
		if err := binds[gwE1].SendFlows([][]byte{datagram}, []uint64{1}, PseudoEndpoint(gwE2)); err != nil {
			t.Fatal(err)
		}
		for _, g := range []GatewayID{gwHub, gwHub2, gwE2, gwE1} {
			receiveAll(t, binds[g])
		}
	}
	if _, ok := binds[gwE1].Direct(PseudoEndpoint(gwE2)); !ok {
		t.Fatal("E1 -> E2 not direct before the reload")
	}

	gws := func(order []GatewayID, rekey GatewayID) []Gateway {
		var out []Gateway
		for _, g := range order {
			gw := w.plan.Gateway(g)
			if g == rekey {
				gw.Key = testIdentity(t, 99, bhcrypto.ChaChaPoly).Public
			}
			out = append(out, gw)
		}
		return out
	}
	hubs := map[string][]string{"e1": {"aks"}, "e2": {"aks"}}
	// The same catalog in another order: E2 gets another id.
	order := []GatewayID{gwX, gwE2, gwHub, gwHub2, gwE1}
	plan, err := NewPlan(gws(order, None), hubs)
	if err != nil {
		t.Fatal(err)
	}
	e1, _ := plan.ByKey(w.plan.Gateway(gwE1).Key)
	e2, _ := plan.ByKey(w.plan.Gateway(gwE2).Key)
	w.relay[gwE1].SetPlan(plan, e1)
	if to, ok := binds[gwE1].Direct(PseudoEndpoint(e2)); !ok || to != addr(gwE2) {
		t.Fatalf("after a reload: Direct(E2) = %v, %v; want %v", to, ok, addr(gwE2))
	}
	if gw, ok := w.relay[gwE1].view.Load().fromCandidate(addr(gwE2)); !ok || gw != e2 {
		t.Fatalf("after a reload: E2's address maps to %v, %v; want %v", gw, ok, e2)
	}
	// E2 with a new key is another gateway: no direct path yet.
	plan, err = NewPlan(gws(order, gwE2), hubs)
	if err != nil {
		t.Fatal(err)
	}
	w.relay[gwE1].SetPlan(plan, e1)
	if _, ok := binds[gwE1].Direct(PseudoEndpoint(e2)); ok {
		t.Fatal("direct path kept for a gateway whose key changed")
	}
	if _, ok := w.relay[gwE1].view.Load().fromCandidate(addr(gwE2)); ok {
		t.Fatal("a rekeyed gateway's old address still maps to it")
	}
}

// TestHintAfterReload: a hub hints a pair at most every HintInterval,
// but a new Plan starts over (its ids may name other gateways), so a
// reload delays no pair's hint.
func TestHintAfterReload(t *testing.T) {
	w, net, binds := bindWorld(t)
	clock := &fakeClock{t: testNow}
	w.relay[gwHub].now, w.relay[gwHub].epoch = clock.now, clock.now()
	buf, n := sealInner(t, w.e2e[0], []byte("pod e1 to pod e2"))
	datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	w.down[gwE1][gwHub2] = true // E1's flows all go through gwHub
	// hints relays one datagram from E1 to E2 and returns how many
	// messages the hub sent E1 (hints: E1 gets nothing else).
	hints := func() int {
		t.Helper()
		if err := binds[gwE1].SendFlows([][]byte{datagram}, []uint64{1}, PseudoEndpoint(gwE2)); err != nil {
			t.Fatal(err)
		}
		if q := queued(net, addr(gwHub)); q != 1 {
			t.Fatalf("%d datagrams at gwHub, want 1", q)
		}
		receiveAll(t, binds[gwHub])
		got := queued(net, addr(gwE1))
		net.mu.Lock()
		clear(net.q)
		net.mu.Unlock()
		return got
	}
	if h := hints(); h != 1 {
		t.Fatalf("first relay: %d hints to E1, want 1", h)
	}
	if h := hints(); h != 0 {
		t.Fatalf("again within HintInterval: %d hints, want 0", h)
	}
	w.relay[gwHub].SetPlan(w.plan, gwHub) // a reload
	if h := hints(); h != 1 {
		t.Fatalf("after a reload: %d hints to E1, want 1", h)
	}
}

// TestDirectStaleReply: a direct probe reply proves the path only when it
// answers a probe of ours still in flight: sent since the last answer and
// not older than DirectTimeout. A reply held back until the path was
// given up, a second answer to one probe or an answer to a probe never
// sent must not put the direct path back in use, or datagrams would go
// straight into a dead path instead of through the hub.
func TestDirectStaleReply(t *testing.T) {
	type setup struct {
		w     *world
		net   *fakeNet
		binds [numTestGateways]*Bind
		clock *fakeClock
	}
	// probe makes E1 probe E2's mapping (data to E2 goes through the
	// hub meanwhile) and returns the probe's echo.
	probe := func(s *setup) uint64 {
		buf, n := sealInner(t, s.w.e2e[0], []byte("pod e1 to pod e2"))
		if err := s.binds[gwE1].SendFlows([][]byte{buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]}, []uint64{1}, PseudoEndpoint(gwE2)); err != nil {
			t.Fatal(err)
		}
		return uint64(s.w.relay[gwE1].ns())
	}
	// forge is a reply E2 seals itself, echoing echo, on its way to E1.
	forge := func(s *setup, echo uint64) {
		msg, ok := directMessage(s.w.e2e[1], s.w.plan.KeyID(gwE2), msgProbeReply, echo)
		if !ok {
			t.Fatal("reply not sealed")
		}
		s.net.mu.Lock()
		s.net.q[addr(gwE1)] = append(s.net.q[addr(gwE1)], fakeDatagram{msg, addr(gwE2)})
		s.net.mu.Unlock()
	}
	drain := func(s *setup, gws ...GatewayID) {
		for _, g := range gws {
			receiveAll(t, s.binds[g])
		}
	}
	tests := []struct {
		name   string
		play   func(s *setup) // ends with the reply on its way to E1
		direct bool
	}{
		{"answer in time", func(s *setup) {
			probe(s)
			drain(s, gwHub, gwHub2, gwE2)
			s.clock.t = s.clock.t.Add(time.Millisecond)
		}, true},
		{"answer held back past DirectTimeout", func(s *setup) {
			probe(s)
			drain(s, gwHub, gwHub2, gwE2)
			s.clock.t = s.clock.t.Add(DirectTimeout + time.Millisecond)
		}, false},
		{"answer to a probe never sent", func(s *setup) {
			echo := probe(s)
			drain(s, gwHub, gwHub2)
			forge(s, echo-uint64(time.Millisecond))
		}, false},
		{"second answer to one probe, after the path was given up", func(s *setup) {
			echo := probe(s)
			drain(s, gwHub, gwHub2, gwE2, gwE1) // answered: direct
			s.clock.t = s.clock.t.Add(DirectProbeInterval)
			probe(s) // this one is lost
			s.net.mu.Lock()
			clear(s.net.q)
			s.net.mu.Unlock()
			s.clock.t = s.clock.t.Add(DirectTimeout + time.Millisecond)
			if _, ok := s.binds[gwE1].Direct(PseudoEndpoint(gwE2)); ok {
				t.Fatal("still direct after a probe went unanswered for DirectTimeout")
			}
			forge(s, echo)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &setup{clock: &fakeClock{t: testNow}}
			s.w, s.net, s.binds = bindWorld(t)
			for g := range numTestGateways {
				s.w.relay[g].now, s.w.relay[g].epoch = s.clock.now, s.clock.now()
			}
			s.clock.t = s.clock.t.Add(time.Second)
			probe(s) // through the hub: it hints both ends
			drain(s, gwHub, gwHub2, gwE1, gwE2)
			s.net.mu.Lock()
			clear(s.net.q)
			s.net.mu.Unlock()
			s.clock.t = s.clock.t.Add(DirectProbeInterval)
			tt.play(s)
			drain(s, gwE1)
			if _, ok := s.binds[gwE1].Direct(PseudoEndpoint(gwE2)); ok != tt.direct {
				t.Errorf("direct after the reply: %v, want %v", ok, tt.direct)
			}
		})
	}
}
