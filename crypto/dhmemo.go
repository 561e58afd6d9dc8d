package crypto

import (
	"crypto/subtle"
	"io"
	"slices"

	"github.com/flynn/noise"
)

// firstMessageDH is an initiator's X25519 for one handshake attempt that
// keeps the state after message 1: the ephemeral key pair and the two
// Diffie-Hellman results (es, ss) that writing the initiation computed.
//
// flynn/noise cannot copy a HandshakeState, and a failed read of a
// response leaves it half-updated (ConsumeResponse), so the state is
// rebuilt from the stored ephemeral key for the next response. Without
// the memo the rebuild cost three X25519 operations (the ephemeral's
// public key, es, ss) on top of the two of reading the response (ee,
// se): anyone who saw our initiation's sender index (a hub relaying it,
// anyone on the path) could make us do five for each forged response.
// With it a rebuild does none, a forged response costs the two of the
// read, and the handshake loop bounds how many it reads per pending
// index (router). This is the state WireGuard keeps after message 1
// (its handshake's chaining key and hash), held in the only form this
// Noise library takes back.
//
// Only results recorded while message 1 is written are kept, never those
// of a response's read. Not safe for concurrent use: its Initiation's.
type firstMessageDH struct {
	eph      noise.DHKey
	haveEph  bool
	memo     [2]dhResult
	n        int
	recorded bool // message 1 is written: record no more
	// resp keeps the X25519 results of reading one response, between
	// beginResponse and endResponse, so trying the response with a
	// second preshared key costs none (Initiation.ConsumeResponse).
	resp   [2]dhResult
	nResp  int
	inResp bool
	// ops counts the X25519 operations done (not answered from memo).
	ops int
}

type dhResult struct{ priv, pub, out []byte }

var _ noise.DHFunc = (*firstMessageDH)(nil)

func (m *firstMessageDH) GenerateKeypair(r io.Reader) (noise.DHKey, error) {
	if m.haveEph {
		return noise.DHKey{Private: slices.Clone(m.eph.Private), Public: slices.Clone(m.eph.Public)}, nil
	}
	m.ops++
	k, err := noise.DH25519.GenerateKeypair(r)
	if err != nil {
		return k, err
	}
	m.eph = noise.DHKey{Private: slices.Clone(k.Private), Public: slices.Clone(k.Public)}
	m.haveEph = true
	return k, nil
}

func (m *firstMessageDH) DH(priv, pub []byte) ([]byte, error) {
	for i := range m.n {
		r := &m.memo[i]
		if subtle.ConstantTimeCompare(r.priv, priv)&subtle.ConstantTimeCompare(r.pub, pub) == 1 {
			return slices.Clone(r.out), nil
		}
	}
	for i := range m.nResp {
		r := &m.resp[i]
		if subtle.ConstantTimeCompare(r.priv, priv)&subtle.ConstantTimeCompare(r.pub, pub) == 1 {
			return slices.Clone(r.out), nil
		}
	}
	m.ops++
	out, err := noise.DH25519.DH(priv, pub)
	if err != nil {
		return nil, err
	}
	switch {
	case !m.recorded && m.n < len(m.memo):
		m.memo[m.n] = dhResult{slices.Clone(priv), slices.Clone(pub), slices.Clone(out)}
		m.n++
	case m.recorded && m.inResp && m.nResp < len(m.resp):
		m.resp[m.nResp] = dhResult{slices.Clone(priv), slices.Clone(pub), slices.Clone(out)}
		m.nResp++
	}
	return out, nil
}

// beginResponse starts keeping the results of one response's read.
func (m *firstMessageDH) beginResponse() { m.inResp = true }

// endResponse forgets them: the next response has another ephemeral.
func (m *firstMessageDH) endResponse() {
	for i := range m.nResp {
		clear(m.resp[i].priv)
		clear(m.resp[i].out)
	}
	m.nResp, m.inResp = 0, false
}

func (m *firstMessageDH) DHLen() int     { return noise.DH25519.DHLen() }
func (m *firstMessageDH) DHName() string { return noise.DH25519.DHName() }

// seal stops recording: message 1 is written.
func (m *firstMessageDH) seal() { m.recorded = true }

// wipe zeroes the secrets it holds.
func (m *firstMessageDH) wipe() {
	clear(m.eph.Private)
	for i := range m.n {
		clear(m.memo[i].priv)
		clear(m.memo[i].out)
	}
	m.n, m.haveEph = 0, false
	m.endResponse()
}
