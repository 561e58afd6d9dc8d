package crypto

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/flynn/noise"
)

// ReceivedInitiation is an initiation that passed ConsumeInitiation. The
// router inspects PeerStatic (is this a known peer?) and Timestamp (is it
// newer than the last one from that peer?) before answering with
// CreateResponse.
//
// It is not safe for concurrent use and is single use: CreateResponse may
// succeed at most once per ReceivedInitiation.
type ReceivedInitiation struct {
	PeerStatic  PublicKey // the initiator's static key, authenticated by the handshake
	SenderIndex uint32    // the initiator's index: becomes our RemoteIndex
	Timestamp   Timestamp
	// PSK: the initiator runs IKpsk2 (FlagPSK). The caller must then
	// SetPresharedKey before CreateResponse, and should refuse an
	// initiation whose PSK differs from what it has for PeerStatic
	// (a peer with a preshared key must not be reached without it).
	PSK bool
	// Previous: the initiation was made for the previous identity of a
	// KeyRing (KeyRing.ConsumeInitiation).
	Previous bool

	hs     *noise.HandshakeState
	cipher CipherKind
	used   bool
	pskSet bool
}

// SetPresharedKey sets the preshared key the response mixes in. Only for
// an initiation with PSK set; the key is copied.
func (ri *ReceivedInitiation) SetPresharedKey(psk PresharedKey) error {
	if !ri.PSK || ri.hs == nil {
		return fmt.Errorf("%w: %w", ErrHandshake, ErrPSK)
	}
	if err := ri.hs.SetPresharedKey(psk[:]); err != nil {
		return fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	ri.pskSet = true
	return nil
}

// ConsumeInitiation reads an initiation addressed to id. Cheap checks run
// first, before any Diffie-Hellman: size (ErrMessageSize), type
// (ErrMessageType), reserved bytes (ErrReserved; byte 1 may be FlagPSK,
// which sets ri.PSK), mac1 keyed by id.Public (ErrMAC1). Then the Noise message is read, which decrypts and
// authenticates the initiator's static key and timestamp (ErrHandshake on
// failure). It does not decide whether the initiator is allowed; that is
// the caller's job. msg is only read.
func (id *Identity) ConsumeInitiation(msg []byte) (*ReceivedInitiation, error) {
	if len(msg) != InitiationSize {
		return nil, ErrMessageSize
	}
	if err := checkInitiationHeader(msg); err != nil {
		return nil, err
	}
	if !CheckMAC1(msg, id.Public) {
		return nil, ErrMAC1
	}
	if err := id.Validate(); err != nil {
		return nil, err
	}
	psk := msg[1]&FlagPSK != 0
	cfg := id.noiseConfig(false, nil, id.rand())
	if psk {
		cfg.PresharedKeyPlacement = 2 // the key is set once the peer is known
	}
	hs, err := noise.NewHandshakeState(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	payload, _, _, err := hs.ReadMessage(nil, msg[initNoiseOff:initMAC1Off])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	if len(payload) != timestampSize || len(hs.PeerStatic()) != KeySize {
		return nil, fmt.Errorf("%w: malformed initiation payload", ErrHandshake)
	}
	ri := &ReceivedInitiation{
		SenderIndex: binary.LittleEndian.Uint32(msg[initSenderOff:]),
		PSK:         psk,
		hs:          hs,
		cipher:      id.Cipher,
	}
	copy(ri.PeerStatic[:], hs.PeerStatic())
	copy(ri.Timestamp[:], payload)
	return ri, nil
}

// CreateResponse answers ri. senderIndex is the index the initiator must
// put in transport messages to us (our LocalIndex). The returned message
// is ResponseSize bytes, mac1 keyed by ri.PeerStatic, mac2 zero; the
// caller owns it. The Keypair has Initiator=false,
// LocalIndex=senderIndex, RemoteIndex=ri.SenderIndex, Created=now. A
// second call on the same ri returns ErrUsed.
//
// id must be the Identity that produced ri (for an ri of a KeyRing, either
// identity of the ring: ri keeps the one that read it). For an ri with PSK
// set, SetPresharedKey must have been called (ErrPSK otherwise).
func (id *Identity) CreateResponse(ri *ReceivedInitiation, senderIndex uint32, now time.Time) (*Keypair, []byte, error) {
	if ri == nil {
		return nil, nil, ErrHandshake
	}
	if ri.used {
		return nil, nil, ErrUsed
	}
	if ri.hs == nil {
		return nil, nil, ErrHandshake // not produced by ConsumeInitiation
	}
	if id.Cipher != ri.cipher {
		return nil, nil, ErrIdentity
	}
	if ri.PSK && !ri.pskSet {
		return nil, nil, fmt.Errorf("%w: %w", ErrHandshake, ErrPSK)
	}
	ri.used = true // any failure below leaves the Noise state unusable
	hs := ri.hs
	ri.hs = nil

	msg := make([]byte, ResponseSize)
	msg[0] = MsgResponse
	binary.LittleEndian.PutUint32(msg[respSenderOff:], senderIndex)
	binary.LittleEndian.PutUint32(msg[respReceiverOff:], ri.SenderIndex)
	out, cs1, cs2, err := hs.WriteMessage(msg[respNoiseOff:respNoiseOff], nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	if len(out) != respNoiseSize || cs1 == nil || cs2 == nil {
		return nil, nil, fmt.Errorf("%w: unexpected response length %d", ErrHandshake, len(out))
	}
	copy(msg[respNoiseOff:], out)
	writeMAC1(msg, ri.PeerStatic)

	// The responder receives with the first cipher state and sends with
	// the second.
	kp, err := newKeypair(id.Cipher, cs2.UnsafeKey(), cs1.UnsafeKey())
	if err != nil {
		return nil, nil, err
	}
	kp.LocalIndex = senderIndex
	kp.RemoteIndex = ri.SenderIndex
	kp.Created = now
	kp.Initiator = false
	return kp, msg, nil
}
