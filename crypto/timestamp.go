package crypto

import (
	"bytes"
	"encoding/binary"
	"time"
)

const timestampSize = 12

// tai64Base is the TAI64 label of the Unix epoch (2^62). Leap seconds are
// ignored: the value only has to increase monotonically per sender.
const tai64Base = 1 << 62

// Timestamp is a TAI64N timestamp: 8 bytes of seconds (2^62 + Unix seconds)
// followed by 4 bytes of nanoseconds, both big-endian, so comparing the
// bytes orders the times. The initiator sends one inside every
// initiation; the responder rejects initiations whose timestamp is not
// After the last one accepted from that peer (replay protection for the
// first handshake message). It is a plain value.
type Timestamp [timestampSize]byte

// NewTimestamp encodes t. Times before the Unix epoch are clamped to it.
func NewTimestamp(t time.Time) Timestamp {
	var ts Timestamp
	secs, nanos := t.Unix(), t.Nanosecond()
	if secs < 0 {
		secs, nanos = 0, 0
	}
	binary.BigEndian.PutUint64(ts[:8], tai64Base+uint64(secs))
	binary.BigEndian.PutUint32(ts[8:], uint32(nanos))
	return ts
}

// After reports whether a is strictly later than b.
func (a Timestamp) After(b Timestamp) bool { return bytes.Compare(a[:], b[:]) > 0 }
