package crypto

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/flynn/noise"
)

// Initiation is the initiator's pending state for one handshake attempt:
// it was created with CreateInitiation and completes with ConsumeResponse.
//
// It is not safe for concurrent use; the router owns it (typically under
// the peer's lock) until it either yields a Keypair or is dropped.
type Initiation struct {
	id          *Identity
	peer        PublicKey
	senderIndex uint32
	ephemeral   [KeySize]byte // to rebuild hs after a failed response
	timestamp   Timestamp
	// psks are the preshared keys a response is tried with, in order
	// (none: plain IK). pskUsed is the one that completed it.
	psks    []PresharedKey
	pskUsed int
	hs      *noise.HandshakeState // nil after a failed read; rebuilt on demand
	// dh keeps message 1's X25519 results, so a rebuild of hs after a
	// failed read costs none (dhmemo.go).
	dh   firstMessageDH
	done bool
}

// CreateInitiation starts a handshake with peer. senderIndex is the index
// the peer must put in its response and in transport messages to us (our
// future LocalIndex). The returned message is InitiationSize bytes with
// mac1 keyed by peer's public key and mac2 zero; the caller owns it.
//
// The returned Initiation keeps a reference to id; id must not change while
// the handshake is pending.
func (id *Identity) CreateInitiation(peer PublicKey, senderIndex uint32, now time.Time) (*Initiation, []byte, error) {
	return id.CreateInitiationPSK(peer, nil, senderIndex, now)
}

// CreateInitiationPSK is CreateInitiation for a peer this gateway shares
// preshared keys with (Noise IKpsk2, FlagPSK set in the message): the
// response is tried with each of psks in order (at most
// MaxPresharedKeys, copied). With no psks it is CreateInitiation, byte
// for byte.
func (id *Identity) CreateInitiationPSK(peer PublicKey, psks []PresharedKey, senderIndex uint32, now time.Time) (*Initiation, []byte, error) {
	if err := id.Validate(); err != nil {
		return nil, nil, err
	}
	if len(psks) > MaxPresharedKeys {
		return nil, nil, fmt.Errorf("%w: %d preshared keys, at most %d", ErrHandshake, len(psks), MaxPresharedKeys)
	}
	in := &Initiation{
		id:          id,
		peer:        peer,
		senderIndex: senderIndex,
		timestamp:   NewTimestamp(now),
		psks:        append([]PresharedKey(nil), psks...),
	}
	if _, err := io.ReadFull(id.rand(), in.ephemeral[:]); err != nil {
		return nil, nil, fmt.Errorf("%w: reading ephemeral key: %v", ErrHandshake, err)
	}
	msg, err := in.start()
	if err != nil {
		return nil, nil, err
	}
	return in, msg, nil
}

// start (re)builds the Noise state from the stored ephemeral key and
// timestamp and returns the initiation message. Rebuilding is
// deterministic, so a rebuilt state matches the message already sent.
func (in *Initiation) start() ([]byte, error) {
	cfg := in.id.noiseConfigDH(true, append([]byte(nil), in.peer[:]...), bytes.NewReader(in.ephemeral[:]), &in.dh)
	if len(in.psks) > 0 {
		cfg.PresharedKeyPlacement = 2 // set per try (ConsumeResponse)
	}
	hs, err := noise.NewHandshakeState(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	msg := make([]byte, InitiationSize)
	msg[0] = MsgInitiation
	if len(in.psks) > 0 {
		msg[1] = FlagPSK
	}
	binary.LittleEndian.PutUint32(msg[initSenderOff:], in.senderIndex)
	out, _, _, err := hs.WriteMessage(msg[initNoiseOff:initNoiseOff], in.timestamp[:])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	if len(out) != initNoiseSize {
		return nil, fmt.Errorf("%w: noise message is %d bytes, want %d", ErrHandshake, len(out), initNoiseSize)
	}
	copy(msg[initNoiseOff:], out)
	writeMAC1(msg, in.peer)
	in.hs = hs
	in.dh.seal()
	return msg, nil
}

// Abandon gives up the handshake: the ephemeral private key is zeroed and
// the Noise state (which holds a copy flynn/noise cannot wipe) is dropped
// for the garbage collector. Later ConsumeResponse calls return ErrUsed.
// Call it when the attempt is retransmitted with a new Initiation, given
// up, or its peer removed.
func (in *Initiation) Abandon() {
	in.done = true
	in.hs = nil
	clear(in.ephemeral[:])
	clear(in.psks)
	in.dh.wipe()
}

// PSK reports whether the initiation runs IKpsk2.
func (in *Initiation) PSK() bool { return len(in.psks) > 0 }

// PSKUsed is the position, in the keys given to CreateInitiationPSK, of
// the preshared key that completed the handshake (0 before that).
func (in *Initiation) PSKUsed() int { return in.pskUsed }

// SenderIndex returns the index this initiation announced (our LocalIndex
// once it completes).
func (in *Initiation) SenderIndex() uint32 { return in.senderIndex }

// Peer returns the responder's static public key.
func (in *Initiation) Peer() PublicKey { return in.peer }

// Local returns the initiator's static public key (the Identity it was
// made with).
func (in *Initiation) Local() PublicKey { return in.id.Public }

// ConsumeResponse completes the handshake with the responder's message.
// Cheap checks run first, in this order and before any Diffie-Hellman:
// size (ErrMessageSize), type (ErrMessageType), reserved bytes
// (ErrReserved), mac1 keyed by our public key (ErrMAC1), receiver index
// equal to our sender index (ErrIndexMismatch). Then the Noise message is
// read (ErrHandshake on failure).
//
// On success the Initiation is spent and later calls return ErrUsed. A
// response that fails any check does not spend it, so a forged response
// cannot kill a pending handshake. The returned Keypair has
// Initiator=true, LocalIndex=SenderIndex(), RemoteIndex=the responder's
// sender index and Created=now. msg is only read.
func (in *Initiation) ConsumeResponse(msg []byte, now time.Time) (*Keypair, error) {
	if in.done {
		return nil, ErrUsed
	}
	if len(msg) != ResponseSize {
		return nil, ErrMessageSize
	}
	if err := checkHeader(msg, MsgResponse); err != nil {
		return nil, err
	}
	if !CheckMAC1(msg, in.id.Public) {
		return nil, ErrMAC1
	}
	if binary.LittleEndian.Uint32(msg[respReceiverOff:]) != in.senderIndex {
		return nil, ErrIndexMismatch
	}
	// With preshared keys the response is tried with each in turn. The
	// response's two X25519 (ee, se) are the same for every try, so the
	// memo answers them after the first: a second key costs hashes and
	// one AEAD open, no Diffie-Hellman.
	tries := max(1, len(in.psks))
	in.dh.beginResponse()
	defer in.dh.endResponse()
	var cs1, cs2 *noise.CipherState
	var err error
	for i := range tries {
		if in.hs == nil {
			if _, err := in.start(); err != nil {
				return nil, err
			}
		}
		if len(in.psks) > 0 {
			if err := in.hs.SetPresharedKey(in.psks[i][:]); err != nil {
				in.hs = nil
				return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
			}
		}
		var payload []byte
		payload, cs1, cs2, err = in.hs.ReadMessage(nil, msg[respNoiseOff:respMAC1Off])
		if err == nil && cs1 != nil && cs2 != nil && len(payload) == 0 {
			in.pskUsed = i
			break
		}
		// A failed read can leave the Noise state half-updated, so
		// drop it and rebuild from the stored ephemeral next time.
		in.hs = nil
		if err == nil {
			err = fmt.Errorf("unexpected handshake state")
		}
	}
	if in.hs == nil {
		if len(in.psks) > 0 {
			return nil, fmt.Errorf("%w: %w (%d tried): %v", ErrHandshake, ErrPSK, tries, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	kp, err := newKeypair(in.id.Cipher, cs1.UnsafeKey(), cs2.UnsafeKey())
	if err != nil {
		in.hs = nil
		return nil, err
	}
	in.done = true
	in.hs = nil
	clear(in.ephemeral[:])
	clear(in.psks)
	in.dh.wipe()
	kp.LocalIndex = in.senderIndex
	kp.RemoteIndex = binary.LittleEndian.Uint32(msg[respSenderOff:])
	kp.Created = now
	kp.Initiator = true
	return kp, nil
}
