package router

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// TestProberPart drives prober alone: the flag it sends follows
// SetCanDeliver, and handleControl books answers to small and MTU probes
// on the gateway's liveness and refuses malformed control messages.
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

	reply := func(flags byte, echo uint64, size int) []byte {
		b := make([]byte, size)
		b[0], b[1] = probeReply, flags
		binary.BigEndian.PutUint64(b[8:16], echo)
		return b
	}
	p := &Peer{}
	sent := r.mono.ns(now.Add(-3 * time.Millisecond))
	pr.handleControl(nil, p, nil, reply(flagCannotDeliver, uint64(sent), probeLen), netip.AddrPort{}, now)
	if got := time.Duration(p.live.rtt.Load()); got != 3*time.Millisecond {
		t.Errorf("rtt %v, want 3ms", got)
	}
	if p.live.probeReplies.Load() != 1 || p.live.acked.Load() != r.mono.ns(now) || !p.live.cannotDeliver.Load() {
		t.Errorf("reply not booked: replies %d acked %d cannotDeliver %v", p.live.probeReplies.Load(), p.live.acked.Load(), p.live.cannotDeliver.Load())
	}
	pr.handleControl(nil, p, nil, reply(0, uint64(sent)|mtuEcho, 1400), netip.AddrPort{}, now)
	if p.live.pmtu.answered.Load() != sent || p.live.probeReplies.Load() != 1 || p.live.cannotDeliver.Load() {
		t.Errorf("MTU probe answer: answered %d (want %d), small replies %d", p.live.pmtu.answered.Load(), sent, p.live.probeReplies.Load())
	}
	pr.handleControl(nil, p, nil, []byte{probeReply, 0, 0}, netip.AddrPort{}, now)
	if got := r.drops.Get(Outside, ReasonMalformed); got != 1 {
		t.Errorf("malformed control messages dropped %d, want 1", got)
	}
}
