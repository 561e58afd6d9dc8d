package router

import (
	"encoding/binary"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router/probestate"
	"net/netip"
	"testing"
	"time"
)

// TestProberPart drives prober alone: the flag it sends follows
// SetCanDeliver, and handleControl books answers to small and MTU probes
// in flight on the gateway's liveness and refuses malformed control
// messages (TestStaleProbeReplies refuses the answers to probes not in
// flight).
func TestProberPart(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Router{mono: newMonoEpoch(now.Add(-time.Minute))}
	r.probe = &prober{r: r}
	pr := r.probe
	if pr.flags() != flagLanes || !r.CanDeliver() {
		t.Fatal("a new router says it cannot deliver")
	}
	r.SetCanDeliver(false)
	if pr.flags() != flagCannotDeliver|flagLanes || r.CanDeliver() {
		t.Fatal("SetCanDeliver(false) not in the flags")
	}
	r.SetCanDeliver(true)
	r.SetDraining(true)
	if pr.flags() != flagDraining|flagLanes || !r.Draining() {
		t.Fatal("SetDraining(true) not in the flags")
	}
	r.SetDraining(false)

	reply := func(flags byte, echo uint64, size int) []byte {
		b := make([]byte, size)
		b[0], b[1] = probeReply, flags
		binary.BigEndian.PutUint64(b[8:16], echo)
		return b
	}
	p := &Peer{}
	p.live.init(DefaultProbeInterval)
	sent := r.mono.ns(now.Add(-3 * time.Millisecond))
	p.live.inflight.Sent(uint64(sent))
	p.live.inflight.Sent(uint64(sent) | probestate.MTUEcho)
	pr.handleControl(nil, p, nil, reply(flagCannotDeliver, uint64(sent), probeLen), netip.AddrPort{}, now)
	if got := time.Duration(p.live.rtt.Load()); got != 3*time.Millisecond {
		t.Errorf("rtt %v, want 3ms", got)
	}
	if p.live.probeReplies.Load() != 1 || p.live.acked.Load() != r.mono.ns(now) || !p.live.cannotDeliver.Load() {
		t.Errorf("reply not booked: replies %d acked %d cannotDeliver %v", p.live.probeReplies.Load(), p.live.acked.Load(), p.live.cannotDeliver.Load())
	}
	pr.handleControl(nil, p, nil, reply(0, uint64(sent)|probestate.MTUEcho, 1400), netip.AddrPort{}, now)
	if p.live.pmtu.Answered() != sent || p.live.probeReplies.Load() != 1 || p.live.cannotDeliver.Load() {
		t.Errorf("MTU probe answer: answered %d (want %d), small replies %d", p.live.pmtu.Answered(), sent, p.live.probeReplies.Load())
	}
	pr.handleControl(nil, p, nil, []byte{probeReply, 0, 0}, netip.AddrPort{}, now)
	if got := r.drops.Get(Outside, ReasonMalformed); got != 1 {
		t.Errorf("malformed control messages dropped %d, want 1", got)
	}
}

// TestLaneFlagsCrossedSessions: when both gateways initiated at once,
// each sends on the session it confirmed last, so the peer's own probes
// arrive on our previous session while its replies to ours arrive on our
// current one. Only messages on the current session may say what the
// peer reads there; one on another session leaves the lane and express
// flags alone, or the data path would drop to lane byte 0 (the
// receiver's hash, perhaps its express socket) until the next reply.
func TestLaneFlagsCrossedSessions(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Router{mono: newMonoEpoch(now.Add(-time.Minute))}
	r.probe = &prober{r: r}
	msg := func(typ, flags byte, echo uint64) []byte {
		b := make([]byte, probeLen)
		b[0], b[1] = typ, flags
		binary.BigEndian.PutUint64(b[8:16], echo)
		return b
	}
	prev := &bhcrypto.Keypair{LocalIndex: 7}
	cur := &bhcrypto.Keypair{LocalIndex: 9}
	p := &Peer{mono: r.mono}
	p.live.init(DefaultProbeInterval)
	p.endpoint.Store(new(netip.AddrPort))
	p.previous.Store(prev)
	p.current.Store(cur)
	for _, step := range []struct {
		name string
		kp   *bhcrypto.Keypair
		typ  byte
		want uint64 // laneSession and expressSession after the message
	}{
		{"the peer's probe on our previous session", prev, probeRequest, 0},
		{"its reply to our probe, on our current one", cur, probeReply, laneTag(cur)},
		{"its next probe, on the previous again", prev, probeRequest, laneTag(cur)},
		{"a late reply on the previous", prev, probeReply, laneTag(cur)},
	} {
		var b outsideBatch // no reply slots: a request is booked, not answered
		echo := uint64(r.mono.ns(now))
		p.live.inflight.Sent(echo) // every reply answers a probe in flight
		r.probe.handleControl(&b, p, step.kp, msg(step.typ, flagLanes|flagExpress, echo), netip.AddrPort{}, now)
		if got, gotX := p.laneSession.Load(), p.expressSession.Load(); got != step.want || gotX != step.want {
			t.Errorf("%s: laneSession %#x expressSession %#x, want %#x", step.name, got, gotX, step.want)
		}
		// What the metrics say (bridgehead_peer_session_features).
		if s, want := p.Stats(), step.want != 0; s.LaneBytes != want || s.Express != want {
			t.Errorf("%s: Stats says lane bytes %v, express %v; want %v", step.name, s.LaneBytes, s.Express, want)
		}
	}
}
