package router

import (
	"encoding/binary"
	"net/netip"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Probes are transport messages whose plaintext is a 16-byte control
// message instead of an IP packet:
//
//	byte 0     probeRequest or probeReply (high nibble 1: never an IP version)
//	bytes 1-7  zero
//	bytes 8-15 echo: opaque to the answerer, copied into the reply
//
// They are authenticated like data, so only the peer can prove itself
// alive, and they are answered at once by the outside loop. The sender
// puts its monotonic send time in echo and reads the round trip off the
// reply.
const (
	probeRequest = 0x10
	probeReply   = 0x11
	probeLen     = bhcrypto.PaddingMultiple // one padding block, no extra padding
)

// isControl reports whether a decrypted plaintext is a control message.
func isControl(plain []byte) bool { return len(plain) > 0 && plain[0]>>4 == 1 }

// probeScratch is a buffer for one sealed control message.
func probeScratch() []byte {
	return make([]byte, bhcrypto.TransportOverhead+probeLen)
}

// sealControl seals a control message of type typ carrying echo into buf.
func sealControl(kp *bhcrypto.Keypair, buf []byte, typ byte, echo uint64) ([]byte, error) {
	body := buf[bhcrypto.TransportHeaderSize : bhcrypto.TransportHeaderSize+probeLen]
	clear(body)
	body[0] = typ
	binary.BigEndian.PutUint64(body[8:16], echo)
	return kp.Seal(buf, probeLen)
}

// handleControl acts on an authenticated control message from p, received
// on kp from `from`. It runs in the outside loop, with b's control buffers,
// and allocates nothing.
func (r *Router) handleControl(b *outsideBatch, p *Peer, kp *bhcrypto.Keypair, plain []byte, from netip.AddrPort, now time.Time) {
	if len(plain) < probeLen {
		r.drops.Add(Outside, ReasonMalformed, 1)
		return
	}
	echo := binary.BigEndian.Uint64(plain[8:16])
	switch plain[0] {
	case probeRequest:
		msg, err := sealControl(kp, b.ctl, probeReply, echo)
		if err != nil {
			return // session exhausted: the handshake loop rekeys
		}
		b.ctlOut[0] = msg
		if err := r.bind.Send(b.ctlOut, from); err != nil {
			r.drops.Add(Inside, ReasonSendError, 1)
			return
		}
		p.lastSend.Store(r.mono.ns(now))
	case probeReply:
		p.live.probeReplies.Add(1)
		if sent := int64(echo); sent > 0 {
			if rtt := r.mono.ns(now) - sent; rtt >= 0 {
				p.live.rtt.Store(rtt)
			}
		}
	default:
		r.drops.Add(Outside, ReasonMalformed, 1)
	}
}

// probeTimers runs the liveness state machine of every remote gateway and
// sends the probes it asks for. It runs in the handshake loop every
// ProbeTick.
func (r *Router) probeTimers(st *routingState, now time.Time) {
	mono := r.mono.ns(now)
	for _, p := range st.order {
		kp := p.current.Load()
		session := kp != nil && usable(kp, now)
		a := p.live.evaluate(mono, p.lastReceive.Load(), session)
		if a.changed {
			// No new handshake here: a peer that lost our session
			// (it restarted) starts one itself when our probes hit
			// an index it does not know, and a dead path would
			// only add handshake load; on a loaded gateway that
			// load would feed more false downs.
			r.logLiveness(p, a.from, now)
		}
		if !a.probe {
			continue
		}
		msg, err := sealControl(kp, r.probeBuf, probeRequest, uint64(mono))
		if err != nil {
			continue
		}
		r.probeOut[0] = msg
		p.live.lastProbe.Store(mono)
		p.live.probesSent.Add(1)
		if err := r.bind.Send(r.probeOut, p.Endpoint()); err != nil {
			r.log.Debug("probe send failed", "site", p.site, "gateway", p.name, "err", err)
			continue
		}
		p.lastSend.Store(mono)
	}
}

func (r *Router) logLiveness(p *Peer, from LiveState, now time.Time) {
	switch to := p.live.State(); {
	case to == LiveDown:
		silent := time.Duration(r.mono.ns(now) - p.lastReceive.Load())
		r.log.Warn("gateway down: no authenticated packet, flows move to the site's other gateways",
			"site", p.site, "gateway", p.name, "endpoint", p.Endpoint(),
			"silent_for", silent.Round(time.Millisecond), "probe_interval", time.Duration(p.live.interval.Load()))
	case from == LiveDown:
		r.log.Info("gateway up again", "site", p.site, "gateway", p.name, "endpoint", p.Endpoint())
	default:
		r.log.Info("gateway up", "site", p.site, "gateway", p.name, "endpoint", p.Endpoint())
	}
}
