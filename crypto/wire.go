package crypto

import (
	"encoding/binary"
	"math"
)

// Wire constants. See the package documentation for the byte layouts.
const (
	MsgInitiation  byte = 1
	MsgResponse    byte = 2
	MsgCookieReply byte = 3 // see CookieChecker and CookieJar
	MsgTransport   byte = 4

	// TransportHeaderSize is type(1) reserved(3)=0 receiverIndex(4, LE)
	// counter(8, LE).
	TransportHeaderSize = 16
	// TagSize is the AEAD authentication tag length.
	TagSize = 16
	// TransportOverhead is what a transport message adds to its
	// (padded) plaintext.
	TransportOverhead = TransportHeaderSize + TagSize
	// PaddingMultiple is the granularity plaintexts are padded to.
	PaddingMultiple = 16

	// InitiationSize is type(1) reserved(3) senderIndex(4) noise(108)
	// mac1(16) mac2(16).
	InitiationSize = 148
	// ResponseSize is type(1) reserved(3) senderIndex(4)
	// receiverIndex(4) noise(48) mac1(16) mac2(16).
	ResponseSize = 92
	// CookieReplySize is type(1) reserved(3) receiverIndex(4) nonce(24)
	// encryptedCookie(16 + 16 tag).
	CookieReplySize = 64

	// RekeyAfterMessages is the send count after which a new handshake
	// should be started.
	RekeyAfterMessages = 1 << 60
	// RejectAfterMessages is the first counter that is never sent nor
	// accepted.
	RejectAfterMessages = math.MaxUint64 - (1 << 13)
)

// Offsets inside handshake messages.
const (
	macSize = 16

	initSenderOff = 4
	initNoiseOff  = 8
	initNoiseSize = 32 + (32 + TagSize) + (timestampSize + TagSize) // 108
	initMAC1Off   = initNoiseOff + initNoiseSize                    // 116
	initMAC2Off   = initMAC1Off + macSize                           // 132

	respSenderOff   = 4
	respReceiverOff = 8
	respNoiseOff    = 12
	respNoiseSize   = 32 + TagSize                 // 48
	respMAC1Off     = respNoiseOff + respNoiseSize // 60
	respMAC2Off     = respMAC1Off + macSize        // 76

	cookieReceiverOff = 4
	cookieNonceOff    = 8
	cookieNonceSize   = 24                               // XChaCha20-Poly1305
	cookieSealedOff   = cookieNonceOff + cookieNonceSize // 32
	cookieSize        = 16
)

// Compile-time checks that the offsets add up to the documented sizes: a
// negative constant converted to uint does not compile.
const (
	_ = uint(initMAC2Off + macSize - InitiationSize)
	_ = uint(InitiationSize - initMAC2Off - macSize)
	_ = uint(respMAC2Off + macSize - ResponseSize)
	_ = uint(ResponseSize - respMAC2Off - macSize)
	_ = uint(cookieSealedOff + cookieSize + TagSize - CookieReplySize)
	_ = uint(CookieReplySize - cookieSealedOff - cookieSize - TagSize)
	// A cookie reply is never larger than the message it answers, so
	// answering spoofed handshakes cannot amplify traffic.
	_ = uint(InitiationSize - CookieReplySize)
	_ = uint(ResponseSize - CookieReplySize)
)

// checkHeader validates the type and the three reserved bytes of any
// message. b must be at least 4 bytes long.
func checkHeader(b []byte, typ byte) error {
	if b[0] != typ {
		return ErrMessageType
	}
	if b[1]|b[2]|b[3] != 0 {
		return ErrReserved
	}
	return nil
}

// checkInitiationHeader is checkHeader for an initiation, whose byte 1 may
// be FlagPSK.
func checkInitiationHeader(b []byte) error {
	if b[0] != MsgInitiation {
		return ErrMessageType
	}
	if b[1]&^FlagPSK|b[2]|b[3] != 0 {
		return ErrReserved
	}
	return nil
}

// parseTransport validates a transport message header and returns its
// fields, or the sentinel error saying what is wrong.
func parseTransport(b []byte) (receiver uint32, counter uint64, err error) {
	if len(b) < TransportOverhead {
		return 0, 0, ErrMessageSize
	}
	// Byte 1 is the lane byte (any value); 2 and 3 are reserved.
	if b[0] != MsgTransport {
		return 0, 0, ErrMessageType
	}
	if b[2]|b[3] != 0 {
		return 0, 0, ErrReserved
	}
	return binary.LittleEndian.Uint32(b[4:8]), binary.LittleEndian.Uint64(b[8:16]), nil
}

// ParseTransportHeader returns the receiver index and counter of a
// transport message. ok is true only if b[0] is MsgTransport, the reserved
// bytes 2 and 3 are zero (byte 1 is the lane byte, any value) and len(b) >= TransportOverhead. It does no cryptography;
// the values are unauthenticated until Keypair.Open succeeds.
func ParseTransportHeader(b []byte) (receiver uint32, counter uint64, ok bool) {
	receiver, counter, err := parseTransport(b)
	return receiver, counter, err == nil
}

// PaddedLen returns n rounded up to a multiple of PaddingMultiple, but never
// more than mtu. If n already exceeds mtu, n is returned; a negative n
// gives 0.
func PaddedLen(n, mtu int) int {
	if n <= 0 {
		return 0
	}
	if n > mtu {
		return n
	}
	if r := n % PaddingMultiple; r != 0 {
		n += PaddingMultiple - r
	}
	return min(n, mtu)
}

// ResponseReceiverIndex returns the receiver index of a handshake response
// so the router can find the pending Initiation. It checks only size, type
// and reserved bytes; no cryptography.
func ResponseReceiverIndex(msg []byte) (uint32, bool) {
	if len(msg) != ResponseSize || checkHeader(msg, MsgResponse) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint32(msg[respReceiverOff:]), true
}
