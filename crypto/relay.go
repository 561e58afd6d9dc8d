package crypto

import (
	"encoding/binary"
)

// Relay messages carry a datagram of another session through a hub (see
// package transit for the design). The datagram is any bridgehead message
// between two other gateways, sealed end to end by them; the relay layer
// only authenticates it, with the keypair of the session between the
// sender and the hub, and never encrypts it again.
//
// Relay (type 5, RelayOverhead = 40 bytes plus the relayed datagram):
//
//	offset size field
//	0      1    type = 5
//	1      3    reserved = 0
//	4      4    receiver index (the recipient's LocalIndex, as transport)
//	8      8    counter (shared with the keypair's transport messages)
//	16     8    peer: KeyID of the destination (spoke to hub) or of the
//	            source (hub to spoke)
//	24     n    relayed datagram, in the clear to this layer
//	24+n   16   tag: AEAD over nothing, with bytes 0..24+n as associated
//	            data and receiver index || counter as nonce
//
// The first 16 bytes are laid out as a transport header, so code that
// finds a session by receiver index (the router's index, the early-drop
// filter) treats both types alike. Relay and transport messages of one
// keypair draw their counters from the same sequence, so no nonce is ever
// used twice under a key, and one replay window covers both. The type
// byte is part of the associated data of both, so neither can be passed
// off as the other.
const (
	MsgRelay byte = 5

	// RelayHeaderSize is the transport header plus the 8-byte peer KeyID.
	RelayHeaderSize = TransportHeaderSize + KeyIDSize
	// RelayOverhead is what a relay message adds to the datagram it
	// carries.
	RelayOverhead = RelayHeaderSize + TagSize
	// KeyIDSize is the length of a KeyID.
	KeyIDSize = 8
)

// KeyID names a gateway on the relay path: the first KeyIDSize bytes of
// its static public key. Public keys are uniformly random curve points,
// so two gateways of one catalog share a KeyID only if the catalog was
// made so on purpose; config's check refuses such a catalog, and a
// relayed datagram addressed by a colliding KeyID would still fail the
// end-to-end authentication at the wrong gateway.
type KeyID [KeyIDSize]byte

// KeyIDOf returns the KeyID of a public key.
func KeyIDOf(k PublicKey) KeyID {
	var id KeyID
	copy(id[:], k[:KeyIDSize])
	return id
}

// ParseRelayHeader returns the receiver index, counter and peer KeyID of
// a relay message. ok is true only if b[0] is MsgRelay, the reserved bytes
// are zero and len(b) >= RelayOverhead. Nothing is authenticated yet:
// the values mean something only once OpenRelay succeeds. It does not
// allocate.
func ParseRelayHeader(b []byte) (receiver uint32, counter uint64, peer KeyID, ok bool) {
	if len(b) < RelayOverhead || checkHeader(b, MsgRelay) != nil {
		return 0, 0, KeyID{}, false
	}
	copy(peer[:], b[TransportHeaderSize:RelayHeaderSize])
	return binary.LittleEndian.Uint32(b[4:8]), binary.LittleEndian.Uint64(b[8:16]), peer, true
}

// SealRelay authenticates a relay message in place.
//
// pkt[:RelayHeaderSize] is free header space, the datagram to carry is
// pkt[RelayHeaderSize:RelayHeaderSize+innerLen], and cap(pkt) must be at
// least RelayOverhead+innerLen (else ErrBufferSize). SealRelay takes the
// next counter atomically, writes the header with peer, appends the tag
// and returns pkt[:RelayOverhead+innerLen], which aliases pkt. The
// datagram itself is not changed. Once the counter reaches
// RejectAfterMessages it returns ErrCounterExhausted. Safe for concurrent
// callers with distinct buffers; it does not allocate.
//
// A hub forwards a relay message by OpenRelay with the source's keypair
// and SealRelay with the destination's on the same buffer: the datagram
// stays where it is and only the header and tag are rewritten.
func (kp *Keypair) SealRelay(pkt []byte, innerLen int, peer KeyID) ([]byte, error) {
	if innerLen < 0 || innerLen > cap(pkt)-RelayOverhead {
		return nil, ErrBufferSize
	}
	counter, n := kp.ReserveCounters(1)
	if n == 0 {
		return nil, ErrCounterExhausted
	}
	end := RelayHeaderSize + innerLen
	pkt = pkt[:end+TagSize]
	pkt[0] = MsgRelay
	pkt[1], pkt[2], pkt[3] = 0, 0, 0
	binary.LittleEndian.PutUint32(pkt[4:8], kp.RemoteIndex)
	binary.LittleEndian.PutUint64(pkt[8:16], counter)
	copy(pkt[TransportHeaderSize:RelayHeaderSize], peer[:])
	// The tag goes right after the associated data; the two do not
	// overlap, which the AEAD requires.
	kp.send.Seal(pkt[end:end], pkt[4:TransportHeaderSize], nil, pkt[:end])
	return pkt, nil
}

// OpenRelay authenticates a relay message. On success inner aliases the
// relayed datagram msg[RelayHeaderSize:len(msg)-TagSize], peer is the
// authenticated KeyID of the header, and counter is the message counter,
// which the caller must pass to CheckReplay before acting on the message.
// msg is not modified, whatever the outcome, and the replay window is not
// touched, so a forged message cannot move it.
//
// Errors: ErrMessageSize, ErrMessageType, ErrReserved, ErrIndexMismatch,
// ErrCounterExhausted, ErrAuth, as Open. Safe for concurrent callers; it
// does not allocate.
func (kp *Keypair) OpenRelay(msg []byte) (inner []byte, peer KeyID, counter uint64, err error) {
	if len(msg) < RelayOverhead {
		return nil, KeyID{}, 0, ErrMessageSize
	}
	if err := checkHeader(msg, MsgRelay); err != nil {
		return nil, KeyID{}, 0, err
	}
	if binary.LittleEndian.Uint32(msg[4:8]) != kp.LocalIndex {
		return nil, KeyID{}, 0, ErrIndexMismatch
	}
	counter = binary.LittleEndian.Uint64(msg[8:16])
	if counter >= RejectAfterMessages {
		return nil, KeyID{}, 0, ErrCounterExhausted
	}
	end := len(msg) - TagSize
	// Opening an empty ciphertext writes nothing: dst gets no bytes.
	if _, err := kp.recv.Open(nil, msg[4:TransportHeaderSize], msg[end:], msg[:end]); err != nil {
		return nil, KeyID{}, 0, ErrAuth
	}
	copy(peer[:], msg[TransportHeaderSize:RelayHeaderSize])
	return msg[RelayHeaderSize:end], peer, counter, nil
}
