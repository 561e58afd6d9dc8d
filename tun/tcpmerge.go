package tun

import (
	"encoding/binary"
	"net/netip"

	"github.com/bridgehead/bridgehead/packet"
)

// TCP receive coalescing for the Offload backend's Write.
//
// Every packet the router writes to the TUN has been opened by the AEAD of
// a tunnel session, so its bytes are the bytes the sending gateway sealed:
// its inner checksum was complete when it was sealed (the sending
// gateway's Read fills in checksums), and the tunnel cannot have damaged
// it. Verifying it again on the way out costs a pass over every payload
// byte (the library's GRO does that before it merges). Like kernel
// WireGuard, which marks what it decrypts CHECKSUM_UNNECESSARY, the merger
// trusts it instead:
//
//   - a run of segments of one TCP flow is merged into one super-packet
//     whose virtio-net header asks the kernel to segment it (GSO) and says
//     the checksum is partial (VIRTIO_NET_HDR_F_NEEDS_CSUM): the TCP
//     checksum field holds the pseudo-header sum, and whoever needs the
//     full checksum (a NIC, or skb_checksum_help before a device without
//     checksum offload) completes it over the bytes as they are;
//   - a TCP packet that merges with nothing is handed over the same way,
//     partial, so the receiving stack does not sum it either.
//
// What this gives up is the end-to-end check against corruption that
// happened before the sending gateway sealed the packet (in the sending
// host's memory, or on the LAN between it and its gateway, where a
// damaged frame with a bad Ethernet FCS is dropped anyway). kernel
// WireGuard accepts the same.
//
// Merge rules, for a segment to join the open run of its flow (same
// addresses and ports): IPv4 without options and fragmentation, with DF,
// or IPv6 with TCP as the next header; the same TTL or hop limit, TOS or
// traffic class (and flow label); flags ACK or ACK|PSH; the same TCP
// header length, acknowledgment number, window and options; a sequence
// number that continues the run; a payload of at most the run's segment
// size (the first segment's). A shorter payload or PSH closes the run;
// the merged packet stays within 65535 bytes and within the head buffer's
// capacity. A segment of the flow that cannot join closes the run and
// starts the flow's next one, so the flow's order is kept.

const (
	// virtio-net header fields (struct virtio_net_hdr, little-endian).
	vnetFlagNeedsCsum = 1
	vnetGSONone       = 0
	vnetGSOTCPv4      = 1
	vnetGSOTCPv6      = 4

	tcpFlagPSH = 0x08
	tcpFlagACK = 0x10

	// tcpChecksumAt is the offset of the checksum in the TCP header.
	tcpChecksumAt = 16
	// mergeSlots is the size of the merger's flow table, a power of two
	// above the largest batch (128), so that probing stays short.
	mergeSlots = 512
)

// tcpRun is one packet to write: a TCP packet and the segments merged
// into it, in the buffer bufs[buf].
type tcpRun struct {
	buf    int    // index of the head packet's buffer
	ipLen  int    // IP header length (20 or 40)
	tcpLen int    // TCP header length
	total  int    // IP length of the (merged) packet
	segs   int    // segments merged, 1 for a lone packet
	gso    int    // segment size: the head segment's payload length
	next   uint32 // sequence number the next segment must carry
	v6     bool
	open   bool // further segments may join
}

// tcpMerger plans and applies TCP coalescing for one Write call. It keeps
// its tables between calls so that a Write allocates nothing; it is owned
// by the Offload's writer (under Offload.wmu) and is not safe for
// concurrent use.
type tcpMerger struct {
	runs []tcpRun
	// slots maps a flow hash to its open run: runs index + 1, valid only
	// when gen matches the merger's generation (no clearing per call).
	slots [mergeSlots]struct {
		gen uint32
		run int32
	}
	gen uint32
}

func newTCPMerger(batch int) *tcpMerger {
	return &tcpMerger{runs: make([]tcpRun, 0, batch)}
}

// tcpHeaders reports whether p is a TCP packet the merger handles, and its
// IP and TCP header lengths: an IPv4 packet that is not a fragment, or an
// IPv6 packet whose next header is TCP, with a TCP header that fits in
// the IP length. Anything else (UDP, ICMP, fragments, IPv6 extension
// headers, malformed packets) is left to the library.
func tcpHeaders(p []byte) (ipLen, tcpLen int, v6, ok bool) {
	if len(p) < 20 {
		return 0, 0, false, false
	}
	switch p[0] >> 4 {
	case 4:
		ipLen = int(p[0]&0x0f) * 4
		if ipLen < 20 || p[9] != 6 || int(binary.BigEndian.Uint16(p[2:])) != len(p) {
			return 0, 0, false, false
		}
		if binary.BigEndian.Uint16(p[6:])&0x3fff != 0 { // MF or an offset
			return 0, 0, false, false
		}
	case 6:
		ipLen, v6 = 40, true
		if len(p) < 40 || p[6] != 6 || int(binary.BigEndian.Uint16(p[4:]))+40 != len(p) {
			return 0, 0, false, false
		}
	default:
		return 0, 0, false, false
	}
	if len(p) < ipLen+20 {
		return 0, 0, false, false
	}
	tcpLen = int(p[ipLen+12]>>4) * 4
	if tcpLen < 20 || ipLen+tcpLen > len(p) {
		return 0, 0, false, false
	}
	return ipLen, tcpLen, v6, true
}

// sameFlow reports whether a and b (TCP, of the same IP version, with IP
// headers of aIP and bIP bytes) have the same addresses and ports.
func sameFlow(a []byte, aIP int, b []byte, bIP int, v6 bool) bool {
	from, to := 12, 20 // IPv4 source and destination
	if v6 {
		from, to = 8, 40
	}
	return string(a[from:to]) == string(b[from:to]) &&
		binary.BigEndian.Uint32(a[aIP:]) == binary.BigEndian.Uint32(b[bIP:])
}

// reset starts a new Write call.
func (m *tcpMerger) reset() {
	m.runs = m.runs[:0]
	m.gen++
	if m.gen == 0 { // wrapped: old stamps could look current
		m.slots = [mergeSlots]struct {
			gen uint32
			run int32
		}{}
		m.gen = 1
	}
}

// add takes the TCP packet bufs[i][offset:] (headers as tcpHeaders
// found them) into the plan: it joins its flow's open run, or starts a
// run of its own. A packet that joins has its payload copied into the
// run's head buffer at once, so bufs[i] is free again afterwards.
func (m *tcpMerger) add(bufs [][]byte, i, offset, ipLen, tcpLen int, v6 bool) {
	p := bufs[i][offset:]
	fh, _ := packet.FlowHash(p, 0) // tcpHeaders checked what it needs
	h := uint32(fh)
	slot := -1
	for probe := uint32(0); probe < mergeSlots; probe++ {
		s := int((h + probe) & (mergeSlots - 1))
		e := &m.slots[s]
		if e.gen != m.gen {
			slot = s
			break
		}
		r := &m.runs[e.run]
		head := bufs[r.buf][offset:]
		// The flow's open run, whatever its header lengths: a packet of
		// the flow that cannot join closes it, so that nothing after
		// the packet joins a run written before it.
		if r.v6 == v6 && sameFlow(head, r.ipLen, p, ipLen, v6) {
			if r.open && r.ipLen == ipLen && r.join(bufs, p, offset, tcpLen) {
				return
			}
			r.open = false
			slot = s // the new run replaces it as the flow's open run
			break
		}
	}
	payload := len(p) - ipLen - tcpLen
	flags := p[ipLen+13]
	mergeable := payload > 0 && (flags == tcpFlagACK || flags == tcpFlagACK|tcpFlagPSH) &&
		(v6 || (ipLen == 20 && p[6]&0x40 != 0))
	m.runs = append(m.runs, tcpRun{
		buf: i, ipLen: ipLen, tcpLen: tcpLen, total: len(p), segs: 1, gso: payload,
		next: binary.BigEndian.Uint32(p[ipLen+4:]) + uint32(payload),
		v6:   v6, open: mergeable && flags&tcpFlagPSH == 0,
	})
	if slot >= 0 {
		m.slots[slot].gen, m.slots[slot].run = m.gen, int32(len(m.runs)-1)
	}
}

// join merges segment p into run r if the rules allow, copying its
// payload behind the run's packet in the head buffer.
func (r *tcpRun) join(bufs [][]byte, p []byte, offset, tcpLen int) bool {
	head := bufs[r.buf][offset:cap(bufs[r.buf])]
	ipLen := r.ipLen
	payload := len(p) - ipLen - tcpLen
	flags := p[ipLen+13]
	switch {
	case tcpLen != r.tcpLen, payload <= 0, payload > r.gso,
		flags != tcpFlagACK && flags != tcpFlagACK|tcpFlagPSH,
		binary.BigEndian.Uint32(p[ipLen+4:]) != r.next,
		r.total+payload > maxIPPacket, r.total+payload > len(head):
		return false
	}
	if r.v6 {
		// version, traffic class, flow label; hop limit.
		if binary.BigEndian.Uint32(p) != binary.BigEndian.Uint32(head) || p[7] != head[7] {
			return false
		}
	} else if p[1] != head[1] || p[8] != head[8] || p[6]&0x40 == 0 { // TOS, TTL, DF
		return false
	}
	// Acknowledgment, data offset (and the reserved bits), window, options.
	if string(p[ipLen+8:ipLen+13]) != string(head[ipLen+8:ipLen+13]) ||
		string(p[ipLen+14:ipLen+16]) != string(head[ipLen+14:ipLen+16]) ||
		string(p[ipLen+20:ipLen+tcpLen]) != string(head[ipLen+20:ipLen+tcpLen]) {
		return false
	}
	copy(head[r.total:], p[ipLen+tcpLen:])
	r.total += payload
	r.segs++
	r.next += uint32(payload)
	if flags&tcpFlagPSH != 0 {
		head[ipLen+13] |= tcpFlagPSH
		r.open = false
	}
	if payload < r.gso {
		r.open = false
	}
	return true
}

// finish completes run r in place for writing: it fixes the IP length and
// header checksum of a merged packet, puts the pseudo-header sum into the
// TCP checksum field, and writes the virtio-net header into the
// HeadroomNeeded bytes in front of offset. It returns the bytes to write,
// header included.
func (r *tcpRun) finish(buf []byte, offset int) []byte {
	p := buf[offset : offset+r.total]
	var src, dst netip.Addr
	if r.v6 {
		src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
	} else {
		src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
	}
	if r.segs > 1 {
		if r.v6 {
			binary.BigEndian.PutUint16(p[4:], uint16(r.total-40))
		} else {
			binary.BigEndian.PutUint16(p[2:], uint16(r.total))
			p[10], p[11] = 0, 0
			binary.BigEndian.PutUint16(p[10:], packet.Checksum(p[:r.ipLen], 0))
		}
	}
	l4 := r.total - r.ipLen
	binary.BigEndian.PutUint16(p[r.ipLen+tcpChecksumAt:], uint16(packet.PseudoHeaderSum(src, dst, 6, l4)))

	h := buf[offset-HeadroomNeeded : offset]
	h[0] = vnetFlagNeedsCsum
	h[1] = vnetGSONone
	hdrLen, gso := 0, 0
	if r.segs > 1 {
		h[1] = vnetGSOTCPv4
		if r.v6 {
			h[1] = vnetGSOTCPv6
		}
		hdrLen, gso = r.ipLen+r.tcpLen, r.gso
	}
	binary.LittleEndian.PutUint16(h[2:], uint16(hdrLen))
	binary.LittleEndian.PutUint16(h[4:], uint16(gso))
	binary.LittleEndian.PutUint16(h[6:], uint16(r.ipLen)) // csum_start
	binary.LittleEndian.PutUint16(h[8:], tcpChecksumAt)   // csum_offset
	return buf[offset-HeadroomNeeded : offset+r.total]
}
