package transit

import (
	"encoding/binary"
	"net/netip"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/packet"
)

// Spreading relayed flows over hub gateways. A spoke reaches a gateway
// behind another NAT through every gateway of every hub site it uses
// (Plan.Hubs). Each relayed datagram goes through the hub gateway that
// ranks first for its flow by rendezvous hashing, the router's own choice
// among a site's gateways (router's site.pick: packet.Mix of the flow hash
// and the first 8 bytes of the gateway's public key), among the hub
// gateways of the best tier:
//
//  1. those with a usable session that are up (they answered our probes
//     within router.ProbeMisses intervals),
//  2. else those with a usable session,
//  3. else those that said, within NoSessionHold, that they have no
//     session with the destination (nosession.go),
//
// and none without a session (nothing can be sealed for them). A flow
// stays on its hub gateway while the tier's members stay the same; when
// one goes down only its flows move, within the probe bound (3 probe
// intervals, 600 ms by default): the router probes a hub gateway at the
// active pace while relayed traffic goes through it (NoteRelayed).
// Datagrams without a flow (handshakes, probes, keepalives) count as
// flow 0.

// hubCand is one hub gateway toward a destination as one send call sees
// it, and what the call sent through it.
type hubCand struct {
	id       GatewayID
	kp       *bhcrypto.Keypair
	to       netip.AddrPort
	rank     uint64
	n, bytes uint64
}

// rankOf is a gateway's rank in rendezvous hashing, as the router's.
func rankOf(k bhcrypto.PublicKey) uint64 { return binary.LittleEndian.Uint64(k[:8]) }

// candidates appends to out the hub gateways of the best tier toward
// dst (see above) and returns it. It allocates nothing when out has room.
func (b *Bind) candidates(dst GatewayID, out []hubCand) []hubCand {
	out = out[:0]
	v := b.relay.view.Load()
	if v == nil || dst < 0 || int(dst) >= len(v.hubs) {
		return out
	}
	best := -2    // below every tier
	var now int64 // Relay.ns, read once a hub gateway said no session
	for i, h := range v.hubs[dst] {
		kp, to, ok := b.sess.Current(h)
		if !ok {
			continue
		}
		key := v.plan.Gateway(h).Key
		tier := 1
		if until := v.noSession[dst][i].Load(); until != 0 {
			if now == 0 {
				now = b.relay.ns()
			}
			if now < until {
				tier = -1 // it said it cannot forward to dst (nosession.go)
			}
		}
		if tier > 0 && b.sess.table.PeerUp(key) {
			tier = 2
		}
		if tier < best {
			continue
		}
		if tier > best {
			out, best = out[:0], tier
		}
		out = append(out, hubCand{id: h, kp: kp, to: to, rank: rankOf(key)})
	}
	return out
}

// pickHub returns the index in cands of the hub gateway for flow.
func pickHub(cands []hubCand, flow uint64) int {
	best, bestScore := 0, uint64(0)
	for i := range cands {
		if s := packet.Mix(flow, cands[i].rank); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// noteRelayed tells the router what went through each hub gateway.
func (b *Bind) noteRelayed(cands []hubCand) {
	v := b.relay.view.Load()
	for i := range cands {
		if c := &cands[i]; c.n > 0 && v != nil {
			b.sess.table.NoteRelayed(v.plan.Gateway(c.id).Key, c.n, c.bytes)
		}
	}
}

// Via reports whether the router's endpoint ep is a gateway reached
// through a hub and, if so, the hub gateways its flows go through now:
// the best tier above (none while no hub gateway has a session). For
// status and metrics; it allocates.
func (b *Bind) Via(ep netip.AddrPort) (via []Gateway, relayed bool) {
	dst, relayed := PseudoGateway(ep)
	if !relayed {
		return nil, false
	}
	plan, _ := b.relay.Plan()
	if plan == nil {
		return nil, true
	}
	for _, c := range b.candidates(dst, nil) {
		via = append(via, plan.Gateway(c.id))
	}
	return via, true
}
