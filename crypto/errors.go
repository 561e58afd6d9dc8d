package crypto

// Error is the type of every sentinel error this package returns. The
// sentinels are constants, so they cannot be reassigned, and returning one
// never allocates. Callers classify failures with errors.Is (or ==), for
// example to count dropped packets per reason.
type Error string

func (e Error) Error() string { return string(e) }

// Sentinel errors. Cheap validation failures are returned bare; failures
// inside the Noise handshake wrap ErrHandshake with detail.
const (
	// ErrMessageSize: the message has the wrong length for its type.
	ErrMessageSize Error = "crypto: wrong message size"
	// ErrMessageType: the first byte is not the expected message type.
	ErrMessageType Error = "crypto: wrong message type"
	// ErrReserved: reserved header bytes are not zero.
	ErrReserved Error = "crypto: reserved header bytes not zero"
	// ErrMAC1: mac1 does not verify for our public key.
	ErrMAC1 Error = "crypto: mac1 mismatch"
	// ErrIndexMismatch: the receiver index is not the one we expect.
	ErrIndexMismatch Error = "crypto: receiver index mismatch"
	// ErrHandshake: the Noise handshake failed (wrong keys, prologue,
	// cipher, or a forged message).
	ErrHandshake Error = "crypto: handshake failed"
	// ErrUsed: a single-use handshake object was used a second time.
	ErrUsed Error = "crypto: handshake state already used"
	// ErrIdentity: the Identity is inconsistent (public key does not
	// match the private key, or unknown cipher).
	ErrIdentity Error = "crypto: invalid identity"
	// ErrCipher: unknown cipher name or CipherKind.
	ErrCipher Error = "crypto: unknown cipher"
	// ErrAuth: a transport message failed authentication.
	ErrAuth Error = "crypto: message authentication failed"
	// ErrCounterExhausted: a keypair's send counter reached
	// RejectAfterMessages, or a received counter is at or beyond it.
	ErrCounterExhausted Error = "crypto: message counter exhausted"
	// ErrBufferSize: the buffer passed to Seal is too small.
	ErrBufferSize Error = "crypto: buffer too small"
	// ErrKeyExpired: a handshake message made for a previous static key
	// whose overlap is over (KeyRing).
	ErrKeyExpired Error = "crypto: previous static key expired"
)
