package earlydrop

import (
	"encoding/binary"

	"github.com/cilium/ebpf/asm"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/internal/bpfasm"
)

// Reason is why the filter dropped a datagram.
type Reason uint32

// Drop reasons, in the order of the counts array.
const (
	ReasonRunt Reason = iota
	ReasonUnknownType
	ReasonBadSize
	ReasonUnknownIndex
	// ReasonBlocked: a handshake message from a source that Block
	// listed (it sent too many messages with a bad MAC), unless the
	// source is a configured peer endpoint.
	ReasonBlocked
	NumReasons
)

func (r Reason) String() string {
	switch r {
	case ReasonRunt:
		return "runt"
	case ReasonUnknownType:
		return "unknown_type"
	case ReasonBadSize:
		return "bad_size"
	case ReasonUnknownIndex:
		return "unknown_index"
	case ReasonBlocked:
		return "blocked"
	}
	return "unknown"
}

// Offsets the program reads. A socket filter on a UDP socket sees the
// datagram from the UDP header on; the IP header is read relative to the
// network header.
const (
	udpHeaderLen = 8
	skbLen       = 0   // offsetof(struct __sk_buff, len)
	skbProtocol  = 16  // offsetof(struct __sk_buff, protocol), big endian
	skbGSOSize   = 176 // offsetof(struct __sk_buff, gso_size), Linux 5.7+

	hdrStartNet = 1 // BPF_HDR_START_NET

	ipv4SrcOff = 12
	ipv6SrcOff = 8
)

// Stack slots (offsets from the frame pointer R10).
const (
	stHeader   = -4  // 4 bytes: type and reserved
	stIndex    = -8  // 4 bytes: receiver index
	stEndpoint = -32 // endpointKeySize bytes
	stReason   = -36 // 4 bytes: counts key
)

// endpointKeySize is the endpoints map key: the source address as 16 bytes
// (IPv4 in its IPv4-mapped IPv6 form), the port in network byte order, two
// zero bytes.
const endpointKeySize = 20

// be16 returns the ctx value of a big-endian 16-bit field as the program
// loads it on this machine.
func be16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// program returns the filter's instructions for the four maps' file
// descriptors. Return value: 0 drops the datagram, 0xffffffff keeps all
// of it. udp is where the UDP header starts in the data the program sees:
// 0 on a socket; tests run the same program on whole IP packets with
// BPF_PROG_TEST_RUN, where it starts after the IP header.
func program(indices, endpoints, counts, blocked int, udp int32) asm.Instructions {
	drop := func(label string, r Reason) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Imm(asm.R8, int32(r)).WithSymbol(label),
			asm.Ja.Label("drop"),
		}
	}
	// load(off, stack, n) copies n bytes of the datagram at off (from
	// the UDP header) to the stack, loadNet from the network header; on
	// failure the datagram is passed.
	copyBytes := func(off, stack, n int32, fromNet bool) asm.Instructions {
		is := asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, off),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, stack),
			asm.Mov.Imm(asm.R4, n),
		}
		if fromNet {
			is = append(is, asm.Mov.Imm(asm.R5, hdrStartNet), asm.FnSkbLoadBytesRelative.Call())
		} else {
			is = append(is, asm.FnSkbLoadBytes.Call())
		}
		return append(is, asm.JNE.Imm(asm.R0, 0, "pass"))
	}
	load := func(off, stack, n int32) asm.Instructions { return copyBytes(udp+off, stack, n, false) }
	loadNet := func(off, stack, n int32) asm.Instructions { return copyBytes(off, stack, n, true) }
	lookup := func(fd int, stack int32) asm.Instructions {
		return asm.Instructions{
			asm.LoadMapPtr(asm.R1, fd),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, stack),
			asm.FnMapLookupElem.Call(),
		}
	}
	// srcKey(l) writes the endpoint key of the datagram's source at
	// stEndpoint (see endpointKeySize); its labels start with l.
	srcKey := func(l string) asm.Instructions {
		v6 := loadNet(ipv6SrcOff, stEndpoint, 16)
		v6[0] = v6[0].WithSymbol(l + "_v6")
		port := load(0, stEndpoint+16, 2)
		port[0] = port[0].WithSymbol(l + "_port")
		is := asm.Instructions{
			asm.StoreImm(asm.RFP, stEndpoint, 0, asm.Word),
			asm.StoreImm(asm.RFP, stEndpoint+4, 0, asm.Word),
			asm.StoreImm(asm.RFP, stEndpoint+8, 0, asm.Word),
			asm.StoreImm(asm.RFP, stEndpoint+12, 0, asm.Word),
			asm.StoreImm(asm.RFP, stEndpoint+16, 0, asm.Word),
			asm.LoadMem(asm.R0, asm.R6, skbProtocol, asm.Word),
			asm.JEq.Imm(asm.R0, be16(0x86DD), l+"_v6"),
			asm.JNE.Imm(asm.R0, be16(0x0800), "pass"), // not IP: cannot tell
			asm.StoreImm(asm.RFP, stEndpoint+10, 0xff, asm.Byte),
			asm.StoreImm(asm.RFP, stEndpoint+11, 0xff, asm.Byte),
		}
		is = append(is, loadNet(ipv4SrcOff, stEndpoint+12, 4)...)
		is = append(is, asm.Ja.Label(l+"_port"))
		is = append(is, v6...)
		return append(is, port...)
	}
	hs := srcKey("h")
	hs[0] = hs[0].WithSymbol("handshake")
	var p bpfasm.Program
	add := p.Add
	add(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, skbLen, asm.Word),
		// A GSO/GRO datagram (any gso_size, whether or not the
		// kernel has counted its segments yet) goes to userspace.
		asm.LoadMem(asm.R0, asm.R6, skbGSOSize, asm.Word),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.JLT.Imm(asm.R7, udp+udpHeaderLen+4, "runt"),
		asm.Sub.Imm(asm.R7, udp+udpHeaderLen), // R7: UDP payload length
		load(udpHeaderLen, stHeader, 4),
		asm.LoadMem(asm.R0, asm.RFP, stHeader, asm.Byte),
		asm.JEq.Imm(asm.R0, int32(bhcrypto.MsgTransport), "transport"),
		asm.JEq.Imm(asm.R0, int32(bhcrypto.MsgInitiation), "initiation"),
		asm.JEq.Imm(asm.R0, int32(bhcrypto.MsgResponse), "response"),
		asm.JEq.Imm(asm.R0, int32(bhcrypto.MsgCookieReply), "cookie"),
		asm.JEq.Imm(asm.R0, int32(bhcrypto.MsgRelay), "relay"),
		drop("unknown_type", ReasonUnknownType),

		asm.JEq.Imm(asm.R7, bhcrypto.InitiationSize, "handshake").WithSymbol("initiation"),
		asm.Ja.Label("bad_size"),
		asm.JEq.Imm(asm.R7, bhcrypto.ResponseSize, "handshake").WithSymbol("response"),
		asm.Ja.Label("bad_size"),
		asm.JEq.Imm(asm.R7, bhcrypto.CookieReplySize, "pass").WithSymbol("cookie"),
		drop("bad_size", ReasonBadSize),

		// A relay message starts with a transport header (package
		// crypto): the same checks, with its own minimum size.
		// A transport message's byte 1 is its lane byte (any value);
		// a relay message's is reserved.
		asm.JLT.Imm(asm.R7, bhcrypto.RelayOverhead, "runt").WithSymbol("relay"),
		asm.LoadMem(asm.R1, asm.RFP, stHeader+1, asm.Byte),
		asm.JNE.Imm(asm.R1, 0, "unknown_type"),
		asm.Ja.Label("reserved"),
		asm.JLT.Imm(asm.R7, bhcrypto.TransportOverhead, "runt").WithSymbol("transport"),
		asm.LoadMem(asm.R1, asm.RFP, stHeader+2, asm.Byte).WithSymbol("reserved"),
		asm.LoadMem(asm.R2, asm.RFP, stHeader+3, asm.Byte),
		asm.Or.Reg(asm.R1, asm.R2),
		asm.JNE.Imm(asm.R1, 0, "unknown_type"),
		load(udpHeaderLen+4, stIndex, 4),
		lookup(indices, stIndex),
		asm.JNE.Imm(asm.R0, 0, "pass"),

		// Unknown index: pass it on if it comes from a configured
		// peer endpoint.
		srcKey("t"),
		lookup(endpoints, stEndpoint),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		drop("unknown_index", ReasonUnknownIndex),

		// A well-sized initiation or response: drop it if its source
		// address is blocked (until a monotonic time in ns), unless
		// the source is a configured peer endpoint.
		hs,
		lookup(blocked, stEndpoint),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R9, asm.R0, 0, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.JGE.Reg(asm.R0, asm.R9, "pass"),
		lookup(endpoints, stEndpoint),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		drop("blocked", ReasonBlocked),
		drop("runt", ReasonRunt),

		asm.StoreMem(asm.RFP, stReason, asm.R8, asm.Word).WithSymbol("drop"),
		lookup(counts, stReason),
		asm.JEq.Imm(asm.R0, 0, "ret0"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("ret0"),
		asm.Return(),

		asm.Mov.Imm32(asm.R0, -1).WithSymbol("pass"),
		asm.Return(),
	)
	return p.Instructions
}
