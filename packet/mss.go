package packet

import (
	"encoding/binary"
	"math/bits"
)

const (
	tcpHeaderLen = 20
	tcpFlagSYN   = 0x02
	tcpOptEnd    = 0
	tcpOptNOP    = 1
	tcpOptMSS    = 2
)

// ClampMSS lowers the MSS option of a TCP SYN or SYN-ACK carried in the IP
// packet b to at most mss, and fixes the TCP checksum incrementally (RFC
// 1624), so a checksum that was valid stays valid. It handles IPv4 options
// (by the IHL) and fragments (only a first fragment carries the TCP header;
// later fragments are left alone) and IPv6 without extension headers (a
// packet whose first next header is not TCP is left alone). It reports
// whether it changed the packet.
//
// A packet that is not TCP, not a SYN, carries no MSS option or one already
// at most mss, or is malformed in any way (including a malformed TCP option
// list) is left untouched. It writes only the two MSS bytes and the two
// checksum bytes, in place, and does not allocate.
func ClampMSS(b []byte, mss uint16) bool {
	info, err := Parse(b)
	if err != nil || info.Protocol != ProtoTCP || info.FragmentOffset != 0 {
		return false
	}
	tcp := b[info.HeaderLen:info.Length]
	if len(tcp) < tcpHeaderLen || tcp[13]&tcpFlagSYN == 0 {
		return false
	}
	dataOff := int(tcp[12]>>4) * 4
	if dataOff < tcpHeaderLen || dataOff > len(tcp) {
		return false
	}
	opts := tcp[tcpHeaderLen:dataOff]
	for i := 0; i < len(opts); {
		switch opts[i] {
		case tcpOptEnd:
			return false
		case tcpOptNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return false
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return false
		}
		if opts[i] != tcpOptMSS {
			i += l
			continue
		}
		if l != 4 {
			return false
		}
		old := binary.BigEndian.Uint16(opts[i+2:])
		if old <= mss {
			return false
		}
		binary.BigEndian.PutUint16(opts[i+2:], mss)
		// The value sits at offset 20+i+2 of the segment; at an odd
		// offset its bytes straddle two checksum words, which is the
		// same as adding the byte-swapped value.
		o, n := old, mss
		if i&1 != 0 {
			o, n = bits.ReverseBytes16(o), bits.ReverseBytes16(n)
		}
		sum := binary.BigEndian.Uint16(tcp[16:])
		binary.BigEndian.PutUint16(tcp[16:], UpdateChecksum(sum, o, n))
		return true
	}
	return false
}
