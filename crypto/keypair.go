package crypto

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// Keypair holds the transport keys of one completed handshake.
//
// The exported fields are set when the Keypair is created and must not be
// modified once it is shared between goroutines. Seal, Open, CheckReplay
// and SendCount are safe for concurrent use. Buffers passed to Seal and
// Open remain owned by the caller; the Keypair keeps no reference to them.
type Keypair struct {
	LocalIndex  uint32    // receiver index peers put in packets for us
	RemoteIndex uint32    // receiver index we put in packets to the peer
	Created     time.Time // when the handshake completed
	Initiator   bool      // whether we initiated the handshake

	send cipher.AEAD // read-only after creation
	recv cipher.AEAD // read-only after creation

	sendCounter atomic.Uint64 // next counter to use

	replayMu sync.Mutex
	replay   ReplayWindow
}

// newAEAD builds the transport AEAD for kind.
func newAEAD(kind CipherKind, key *[KeySize]byte) (cipher.AEAD, error) {
	switch kind {
	case AESGCM:
		block, err := aes.NewCipher(key[:])
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(block)
	case ChaChaPoly:
		return chacha20poly1305.New(key[:])
	}
	return nil, ErrCipher
}

// newKeypair builds a Keypair from raw send and receive keys; the caller
// fills in the exported fields. The key arguments are copies and are
// wiped before returning (best effort).
func newKeypair(kind CipherKind, sendKey, recvKey [KeySize]byte) (*Keypair, error) {
	defer clear(sendKey[:])
	defer clear(recvKey[:])
	send, err := newAEAD(kind, &sendKey)
	if err != nil {
		return nil, err
	}
	recv, err := newAEAD(kind, &recvKey)
	if err != nil {
		return nil, err
	}
	if send.NonceSize() != TransportHeaderSize-4 || send.Overhead() != TagSize {
		return nil, ErrCipher
	}
	return &Keypair{send: send, recv: recv}, nil
}

// ReserveCounters takes up to n consecutive send counters with one atomic
// operation and returns the first and how many it took: fewer than n only
// near RejectAfterMessages, and 0 once the keypair is exhausted. A sender
// that seals a batch for one session draws its counters this way, so that
// lanes sealing the same session share the counter's cache line once per
// batch instead of once per packet. Counters reserved and not used are
// gaps, which receivers' replay windows accept. Safe for concurrent
// callers; each reservation is disjoint from every other.
func (kp *Keypair) ReserveCounters(n int) (first uint64, got int) {
	if n <= 0 {
		return 0, 0
	}
	for {
		c := kp.sendCounter.Load()
		if c >= RejectAfterMessages {
			return 0, 0
		}
		end := uint64(RejectAfterMessages)
		if RejectAfterMessages-c > uint64(n) {
			end = c + uint64(n)
		}
		if kp.sendCounter.CompareAndSwap(c, end) {
			return c, int(end - c)
		}
	}
}

// Seal encrypts a transport message in place.
//
// pkt[:TransportHeaderSize] is free header space, the (already padded)
// plaintext is pkt[TransportHeaderSize:TransportHeaderSize+plainLen], and
// cap(pkt) must be at least TransportOverhead+plainLen (else
// ErrBufferSize). Seal takes the next counter atomically, writes the
// header, encrypts, and returns pkt[:TransportOverhead+plainLen], which
// aliases pkt. Once the counter reaches RejectAfterMessages it returns
// ErrCounterExhausted. Safe for concurrent callers with distinct buffers.
// It does not allocate. The lane byte is 0 (no lane; see SealLane).
func (kp *Keypair) Seal(pkt []byte, plainLen int) ([]byte, error) {
	return kp.SealLane(pkt, plainLen, 0)
}

// SealLane is Seal with lane in header byte 1 (see the wire format): the
// receiver's kernel picks its socket, and so its core, by it. The lane is
// authenticated with the rest of the header. Only a receiver that
// announced it reads lane bytes may get a non-zero one: older receivers
// drop transport messages whose byte 1 is not zero.
func (kp *Keypair) SealLane(pkt []byte, plainLen int, lane byte) ([]byte, error) {
	if plainLen < 0 || plainLen > cap(pkt)-TransportOverhead {
		return nil, ErrBufferSize
	}
	counter, n := kp.ReserveCounters(1)
	if n == 0 {
		return nil, ErrCounterExhausted
	}
	return kp.sealAt(pkt, plainLen, lane, counter), nil
}

// SealLaneAt is SealLane with counter, which the caller took from
// ReserveCounters and uses once. It is what a batch sealer calls; a
// counter not from ReserveCounters, or used twice, reuses a nonce.
func (kp *Keypair) SealLaneAt(pkt []byte, plainLen int, lane byte, counter uint64) ([]byte, error) {
	if plainLen < 0 || plainLen > cap(pkt)-TransportOverhead {
		return nil, ErrBufferSize
	}
	if counter >= RejectAfterMessages {
		return nil, ErrCounterExhausted
	}
	return kp.sealAt(pkt, plainLen, lane, counter), nil
}

func (kp *Keypair) sealAt(pkt []byte, plainLen int, lane byte, counter uint64) []byte {
	pkt = pkt[:TransportOverhead+plainLen]
	pkt[0] = MsgTransport
	pkt[1], pkt[2], pkt[3] = lane, 0, 0
	binary.LittleEndian.PutUint32(pkt[4:8], kp.RemoteIndex)
	binary.LittleEndian.PutUint64(pkt[8:16], counter)
	// Nonce = receiverIndex || counter, AD = the whole header.
	body := pkt[TransportHeaderSize : TransportHeaderSize+plainLen]
	kp.send.Seal(body[:0], pkt[4:TransportHeaderSize], body, pkt[:TransportHeaderSize])
	return pkt
}

// Open authenticates and decrypts a transport message in place. On success
// plaintext aliases msg[TransportHeaderSize:len(msg)-TagSize] and counter
// is the authenticated message counter, which the caller must pass to
// CheckReplay before using the plaintext. Open does not touch the replay
// window, so a forged packet cannot move it.
//
// Errors: ErrMessageSize, ErrMessageType, ErrReserved, ErrIndexMismatch
// (receiver index is not LocalIndex), ErrCounterExhausted (counter at or
// beyond RejectAfterMessages), ErrAuth. After ErrAuth the contents of
// msg's body are unspecified (the AEAD may wipe them). Safe for
// concurrent callers with distinct buffers. It does not allocate.
func (kp *Keypair) Open(msg []byte) (plaintext []byte, counter uint64, err error) {
	receiver, counter, err := parseTransport(msg)
	if err != nil {
		return nil, 0, err
	}
	if receiver != kp.LocalIndex {
		return nil, 0, ErrIndexMismatch
	}
	if counter >= RejectAfterMessages {
		return nil, 0, ErrCounterExhausted
	}
	body := msg[TransportHeaderSize:]
	plaintext, err = kp.recv.Open(body[:0], msg[4:TransportHeaderSize], body, msg[:TransportHeaderSize])
	if err != nil {
		return nil, 0, ErrAuth
	}
	return plaintext, counter, nil
}

// CheckReplay records counter in the keypair's replay window and reports
// whether it is new and inside the window. Call it only with the counter
// of a message Open accepted. Safe for concurrent callers; does not
// allocate.
func (kp *Keypair) CheckReplay(counter uint64) bool {
	kp.replayMu.Lock()
	ok := kp.replay.Check(counter)
	kp.replayMu.Unlock()
	return ok
}

// SendCount returns how many send counters have been used so far. Compare
// it with RekeyAfterMessages to decide when to start a new handshake.
func (kp *Keypair) SendCount() uint64 {
	return kp.sendCounter.Load()
}
