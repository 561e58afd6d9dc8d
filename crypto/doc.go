// Package crypto implements bridgehead's key handling, Noise IK handshake
// and transport encryption.
//
// # Overview
//
// Two nodes with known curve25519 static keys run a one-round-trip Noise
// IK handshake (Noise_IK_25519_<cipher>_BLAKE2s, cipher AESGCM or
// ChaChaPoly, via github.com/flynn/noise). The Noise protocol name
// contains the cipher and both sides mix the Prologue into the handshake
// hash, so nodes configured with a different cipher, protocol version or
// cluster name cannot complete a handshake. A completed handshake yields a
// Keypair: one AEAD key per direction, a send counter and a replay
// window. Keypairs never rekey themselves; the router starts a new
// handshake once SendCount reaches RekeyAfterMessages (or a time limit of
// its choosing) and must stop using a keypair when Seal returns
// ErrCounterExhausted.
//
// # Ownership and concurrency
//
// The package has no package-level mutable state. Identity is read-only
// during handshakes and may be shared. Initiation and ReceivedInitiation
// are single-owner, single-use handshake states. Keypair methods are safe
// for concurrent use. Message buffers always stay owned by the caller:
// handshake functions only read their input and return freshly allocated
// messages; Seal and Open work in place on the caller's buffer and keep no
// reference to it. Seal, Open and CheckReplay do not allocate.
//
// # Wire format
//
// All integers are little endian unless noted. Every message starts with a
// one-byte type and three reserved bytes that must be zero; receivers drop
// messages with other values. The one exception is a transport message's
// byte 1, its lane byte (below). An "index" is a random 32-bit number a node
// picks to identify one handshake/keypair locally: each side announces
// its own as the sender index, and the other side echoes it as the
// receiver index so the receiver can find its state with a map lookup.
//
// Initiation (type 1, InitiationSize = 148 bytes):
//
//	offset size field
//	0      1    type = 1
//	1      1    flags: 0, or FlagPSK (see Preshared keys)
//	2      2    reserved = 0
//	4      4    sender index (initiator's)
//	8      108  Noise IK message 1:
//	              8    32  ephemeral public key (clear)
//	              40   48  encrypted initiator static key (32 + 16 tag)
//	              88   28  encrypted payload: 12-byte TAI64N timestamp + 16 tag
//	116    16   mac1
//	132    16   mac2 (zero, or keyed by a cookie; see Cookies)
//
// Response (type 2, ResponseSize = 92 bytes):
//
//	offset size field
//	0      1    type = 2
//	1      3    reserved = 0
//	4      4    sender index (responder's)
//	8      4    receiver index (= initiator's sender index)
//	12     48   Noise IK message 2:
//	              12   32  ephemeral public key (clear)
//	              44   16  encrypted empty payload (tag only)
//	60     16   mac1
//	76     16   mac2 (zero, or keyed by a cookie; see Cookies)
//
// Cookie reply (type 3, CookieReplySize = 64 bytes), sent instead of
// doing Diffie-Hellman by a node under load (see Cookies):
//
//	offset size field
//	0      1    type = 3
//	1      3    reserved = 0
//	4      4    receiver index (= sender index of the answered message)
//	8      24   nonce (random)
//	32     32   encrypted cookie (16 + 16 tag)
//
// Transport (type 4, TransportOverhead = 32 bytes plus the payload):
//
//	offset size field
//	0      1    type = 4
//	1      1    lane (0: none; see below)
//	2      2    reserved = 0
//	4      4    receiver index (the recipient's LocalIndex)
//	8      8    counter
//	16     n    encrypted padded plaintext
//	16+n   16   AEAD tag
//
// The transport AEAD (AES-256-GCM or ChaCha20-Poly1305, keys from the
// Noise Split) uses the 12 header bytes [4:16], receiver index || counter,
// as its nonce. The nonce is unique per key because the counter is: each
// direction has its own key and the sender never reuses a counter. The
// associated data is the whole 16-byte header, so any header change fails
// authentication. Taking the nonce straight from the packet lets Seal and
// Open run with no scratch buffer and no allocation. The initiator sends
// with the first Split key and receives with the second; the responder
// does the reverse.
//
// The lane byte of a transport message lets the receiver spread one
// peer's datagrams over its cores while each inner flow stays in order:
// the sender puts a value derived from the inner packet's flow in it
// (1-255; 0 means none) and the receiver's kernel steers the datagram to
// one of its sockets by it (package udp, ListenLanes). Receivers accept
// any value; a sender sets one only toward a receiver that said it
// accepts them (package router's probe flags), because receivers that
// predate the lane byte drop transport messages whose byte 1 is not zero.
//
// Relay (type 5, RelayOverhead = 40 bytes plus the relayed datagram)
// carries another session's datagram through a hub, authenticated but not
// encrypted again, with the keys and counters of the session between the
// sender and the hub: see relay.go.
//
// Counters start at 0 and increase by one per message. A sender stops at
// RejectAfterMessages (2^64 - 2^13 - 1); a receiver drops counters at or
// beyond it. Receivers keep a sliding replay window of ReplayWindowSize
// (16320) counters: reordered packets within the window are accepted once,
// duplicates and older packets are dropped. The window is only updated
// after the packet authenticated.
//
// The plaintext is padded with zeros to a multiple of PaddingMultiple (16)
// bytes, but never beyond the path MTU (see PaddedLen), to hide exact
// packet lengths. The inner protocol (IP) carries its own length, so the
// receiver needs no pad-length field.
//
// # MACs
//
// mac1 = BLAKE2s-128 keyed with BLAKE2s-256("mac1----" || recipient static
// public key), computed over every byte before the mac1 field. The
// initiation's mac1 is keyed by the responder's key and the response's by
// the initiator's key. Since it needs only the recipient's public key, it
// is not authentication: it lets a node drop handshake messages not meant
// for it, or from a party that does not know its public key, with one hash
// and before any Diffie-Hellman. mac2 = BLAKE2s-128 keyed with a cookie
// the recipient gave us, computed over every byte before the mac2 field
// (mac1 included), or zero when we hold no fresh cookie; see Cookies.
// Sender indexes are not authenticated by the handshake; tampering with
// them only makes the handshake or the keypair unusable, which an on-path
// attacker could cause anyway.
//
// # Cookies
//
// A node under load (the router decides, typically with a rate limiter per
// source address) stops answering handshake messages that passed mac1 but
// carry no valid mac2 for their source address (CookieChecker.CheckMAC2).
// It answers them with a cookie reply instead (CookieChecker.CreateReply),
// which costs no Diffie-Hellman and is smaller than any handshake message,
// so spoofed floods are neither expensive nor amplified. Only a sender that
// receives packets at its claimed address learns the cookie; it puts mac2
// into its next handshake messages to that node (CookieJar) and is then
// served even under load. Either side of a handshake can send a cookie
// reply: the initiator to a response as well as the responder to an
// initiation.
//
// The cookie is BLAKE2s-128 keyed with a 32-byte random secret over the
// source IP address (4 bytes for IPv4 and IPv4-mapped IPv6, else 16) and
// UDP port (2 bytes, little endian). The secret is replaced every 120 s;
// mac2 made with a cookie from the current or the previous secret is
// accepted, so a cookie works for at least 120 s and at most 240 s after
// it was issued. Senders stop using a cookie 115 s after receiving it.
//
// The cookie travels encrypted with XChaCha20-Poly1305 under
// BLAKE2s-256("cookie--" || replying node's static public key), with a
// random 24-byte nonce and the mac1 of the answered message as associated
// data. Binding the reply to the mac1 we sent means that a third party
// who knows the public key but did not see our message cannot plant a
// bogus cookie in our CookieJar (which would make our mac2 wrong). A
// CookieJar accepts one reply per message it Sent, and only for the last
// one.
//
// CookieChecker and CookieJar are safe for concurrent use.
//
// # Prologue
//
// The Noise prologue is "bridgehead/1" || 0x00 || cluster name (see
// Prologue). It is not sent; both sides must already agree on it.
//
// # Preshared keys
//
// Two sites may share a PresharedKey on top of their static keys. Their
// handshakes then run Noise_IKpsk2 (the key is mixed in at the end of
// the response, as WireGuard does), and the initiator sets FlagPSK in
// byte 1 of the initiation, the one reserved byte that may be non-zero:
// the responder must know the protocol name to read the initiation,
// before it knows who sent it. mac1 covers the flag. Without a preshared
// key nothing changes on the wire. A responder refuses an initiation
// whose mode differs from what it has for the initiator (ErrPSK from the
// caller's check), so a pair configured with a key is never reached
// without it.
//
// Rotation: a pair may have two keys at once (MaxPresharedKeys), listed
// in order. The responder mixes in its first; the initiator, which cannot
// know which one the responder has first, tries each on the response.
// The response's Diffie-Hellman results are kept across the tries, so a
// second key costs hashes and one AEAD open. A response that fails with
// every key returns ErrPSK (wrapped in ErrHandshake): the pair's keys
// differ, or the response was forged.
//
// # Key rollover
//
// A KeyRing holds a gateway's current static identity and, for an
// overlap after a rotation (DefaultKeyOverlap), its previous one. An
// initiation's mac1 names the key it was made for, so KeyRing.Select
// finds the identity with two BLAKE2s passes at most and no trial
// Diffie-Hellman; a message for the previous key after the overlap is
// ErrKeyExpired. New handshakes are initiated with the current key only.
//
// # Replay of initiations
//
// Every initiation carries a TAI64N Timestamp (big-endian 2^62 + Unix
// seconds, then nanoseconds) encrypted to the responder. The router must
// remember the newest timestamp accepted per peer and ignore initiations
// whose timestamp is not After it, so a captured initiation cannot be
// replayed to reset a session.
package crypto
