package steer

import (
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/bridgehead/bridgehead/internal/bpfasm"
)

// Buckets is the number of flow buckets: a flow's token bucket is
// state[hash % Buckets], and flows that share one share its tokens.
const Buckets = 1024

// Defaults for the zero fields of Config. The flow bucket is
// package router/sparse's: about 1 Mbit/s, and a TCP handshake and a small
// request or response at once.
const (
	DefaultRate       = 128 << 10 // bytes per second
	DefaultBurst      = 16 << 10  // bytes
	DefaultQuiet      = 200 * time.Millisecond
	DefaultTotalRate  = 2 << 20   // bytes per second
	DefaultTotalBurst = 256 << 10 // bytes
	// DefaultPacketCost is what the daemon sets Config.PacketCost to;
	// package router/sparse's readers charge it too.
	DefaultPacketCost = 512 // bytes
)

// MaxQueues is the most bulk queues a program steers to: with the express
// queue that makes 256, the kernel's limit of queues per TUN interface
// (MAX_TAP_QUEUES).
const MaxQueues = 255

// maxBytes bounds Rate, Burst, TotalRate and TotalBurst: they are 32-bit
// immediates in the program, and the products it forms (a gap shorter
// than the refill time times Rate, a size times 1e9) stay inside 64 bits.
const maxBytes = math.MaxInt32

// maxPacketCost bounds PacketCost: a packet's cost stays far below
// maxBytes (an IP packet is at most 64 KiB).
const maxPacketCost = 1 << 20

// Config is a steering program's configuration. Zero fields, Queues
// and PacketCost aside, take the defaults above.
type Config struct {
	// Queues is the number of bulk queues n, 1..MaxQueues: a bulk flow
	// goes to queue hash % n. The express queue is index n, so the TUN
	// interface has n+1 attached queues.
	Queues int
	// Rate (bytes/s) and Burst (bytes) are each flow bucket's token
	// bucket.
	Rate, Burst int
	// Quiet is how long a bulk flow must send nothing to be sparse
	// again. As in package router/sparse, a bucket's first packet counts as
	// one after a gap of Quiet: with Quiet below Burst/Rate a new flow
	// starts with Quiet*Rate tokens, not Burst.
	Quiet time.Duration
	// TotalRate (bytes/s) and TotalBurst (bytes) are the token bucket
	// of the express queue as a whole: together with the flow buckets,
	// a packet is sparse only if both have its size.
	TotalRate, TotalBurst int
	// PacketCost (bytes, 0: none) is added to each packet's length in
	// both buckets, so that a flow of many small packets is not sparse:
	// the ACKs of a fast bulk flow send few bytes but hundreds of
	// packets a second, and on the express lane each would wake its
	// real-time loops. With DefaultRate and DefaultPacketCost a flow of
	// 64-byte packets is sparse up to about 230 a second (a ping every
	// 20 ms is 50), and with DefaultTotalRate the express queue takes
	// at most about 3,600 such packets a second.
	PacketCost int
	// Seed keys the choice of flow buckets; 0 picks a random one at
	// Load. Set it only to make the choice reproducible (tests). The
	// bulk queues are not keyed (LaneHash).
	Seed uint32
}

// withDefaults returns c with defaults in its zero fields, or an error
// that names the first field out of range.
func (c Config) withDefaults() (Config, error) {
	if c.Queues < 1 || c.Queues > MaxQueues {
		return c, fmt.Errorf("steer: Queues %d outside [1, %d]", c.Queues, MaxQueues)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"Rate", &c.Rate, DefaultRate},
		{"Burst", &c.Burst, DefaultBurst},
		{"TotalRate", &c.TotalRate, DefaultTotalRate},
		{"TotalBurst", &c.TotalBurst, DefaultTotalBurst},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 0 || *f.v > maxBytes {
			return c, fmt.Errorf("steer: %s %d outside [1, %d] (0 for the default %d)", f.name, *f.v, maxBytes, f.def)
		}
	}
	if c.PacketCost < 0 || c.PacketCost > maxPacketCost {
		return c, fmt.Errorf("steer: PacketCost %d outside [0, %d]", c.PacketCost, maxPacketCost)
	}
	if c.Quiet == 0 {
		c.Quiet = DefaultQuiet
	}
	if c.Quiet < 0 {
		return c, fmt.Errorf("steer: Quiet %v is negative (0 for the default %v)", c.Quiet, DefaultQuiet)
	}
	return c, nil
}

// State map layout: Buckets flow buckets, then the aggregate at index
// Buckets. Every value is valueSize bytes; a flow bucket holds the time
// of its last packet (u64 bpf_ktime_get_ns; 0 never), its tokens (s64
// bytes) and its bulk flag (u32, then 4 bytes of padding). The aggregate
// uses the first word only (see program).
const (
	stateEntries = Buckets + 1
	valueSize    = 24
	offLast      = 0
	offTokens    = 8
	offBulk      = 16
	offTAT       = 0
)

// Stack slots (offsets from the frame pointer R10).
const (
	stKey   = -4 // 4 bytes: the state map key
	stQueue = -8 // 4 bytes: the flow's bulk queue
)

const (
	skbLen = 0 // offsetof(struct __sk_buff, len)

	// casTries is how often the program tries to take the aggregate's
	// tokens when other CPUs take them at the same time; after that it
	// treats the aggregate as short.
	casTries = 4
)

// Hash constants: the golden ratio for each word, murmur3's fmix32 at the
// end.
const (
	mixMul = 0x9e3779b1
	fmix1  = 0x85ebca6b
	fmix2  = 0xc2b2ae35
)

// u32 is v as the program's 32-bit immediate.
func u32(v uint32) int32 { return int32(v) }

// program returns the steering program's instructions for the state map
// state and a Config c that withDefaults accepted. It reads the packet
// from the IP header on (skb->data of a packet routed into an IFF_TUN
// interface) and returns the TUN queue: c.Queues, the express queue, for
// a sparse flow; Lane(h) % c.Queues for a bulk one; 0 for a packet it
// cannot parse.
//
// Flow hash h: LaneHash (hash.go says why it is symmetric and unkeyed),
// the words as big-endian values, each mixed in as h = (h ^ w) * mixMul;
// h ^= h >> 16, from h = 0, then fmix32: IPv4 source + destination,
// protocol and, for TCP/UDP/SCTP/UDP-Lite in a packet that is not a
// fragment, source port + destination port after IHL*4 bytes; IPv6 source
// + destination (4 words), next header and, if that is
// TCP/UDP/SCTP/UDP-Lite, the ports at byte 40. Ports beyond the packet (or
// an IHL below 5) are left out. The flow bucket is fmix32(h ^ c.Seed) %
// Buckets: keyed, so that nobody can aim a flow at another's bucket.
//
// Sparse or bulk: the flow bucket runs
// sparse.Flows.Sparse of package router/sparse (R9 points at it), and a packet
// it finds sparse must also fit the aggregate at state[Buckets] (R8).
// The aggregate is a token bucket in its GCRA form, one word: the
// theoretical arrival time tat; a packet of size bytes costs
// ceil(size*1e9/TotalRate) ns and fits if max(tat, now)+cost-now <=
// TotalBurst*1e9/TotalRate, i.e. if the bucket holds size tokens. One
// word so that it is taken with a compare-and-exchange: exact however
// many CPUs run the program. A packet the aggregate does not fit marks its
// flow bulk, as one that outgrows its own bucket.
func program(state int, c Config) asm.Instructions {
	n := int32(c.Queues)
	quiet := int64(c.Quiet)
	refill := int64(c.Burst) * 1e9 / int64(c.Rate)
	tolerance := int64(c.TotalBurst) * 1e9 / int64(c.TotalRate)

	// mix mixes the word in R0 into the hash in R8 (32-bit), with R0
	// as scratch.
	mix := asm.Instructions{
		asm.Xor.Reg32(asm.R8, asm.R0),
		asm.Mul.Imm32(asm.R8, u32(mixMul)),
		asm.Mov.Reg32(asm.R0, asm.R8),
		asm.RSh.Imm32(asm.R0, 16),
		asm.Xor.Reg32(asm.R8, asm.R0),
	}
	// portSum turns the ports word in R0 into source + destination
	// port, with R1 as scratch.
	portSum := asm.Instructions{
		asm.Mov.Reg32(asm.R1, asm.R0),
		asm.RSh.Imm32(asm.R1, 16),
		asm.And.Imm32(asm.R0, 0xffff),
		asm.Add.Reg32(asm.R0, asm.R1),
	}
	// fmix is murmur3's fmix32 of R8, with R0 (a copy of R8 on entry)
	// as scratch.
	fmix := asm.Instructions{
		asm.RSh.Imm32(asm.R0, 16),
		asm.Xor.Reg32(asm.R8, asm.R0),
		asm.Mul.Imm32(asm.R8, u32(fmix1)),
		asm.Mov.Reg32(asm.R0, asm.R8),
		asm.RSh.Imm32(asm.R0, 13),
		asm.Xor.Reg32(asm.R8, asm.R0),
		asm.Mul.Imm32(asm.R8, u32(fmix2)),
		asm.Mov.Reg32(asm.R0, asm.R8),
		asm.RSh.Imm32(asm.R0, 16),
		asm.Xor.Reg32(asm.R8, asm.R0),
	}
	// ports jumps to label if the protocol in R9 starts with 16-bit
	// source and destination ports: TCP, UDP, SCTP, UDP-Lite.
	ports := func(label string) asm.Instructions {
		var is asm.Instructions
		for _, p := range [...]int32{6, 17, 132, 136} {
			is = append(is, asm.JEq.Imm(asm.R9, p, label))
		}
		return append(is, asm.Ja.Label("hashed"))
	}
	// lookup leaves in R0 the state map value of the key at stKey (an
	// array map: never NULL for a key below stateEntries, but the
	// verifier wants the check).
	lookup := asm.Instructions{
		asm.LoadMapPtr(asm.R1, state),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "bulk_ret"),
	}

	var p bpfasm.Program
	add := p.Add
	// R6 ctx (LD_ABS and LD_IND need it there), R7 skb->len. LD_ABS and
	// LD_IND leave the value in R0 and clobber R1-R5; every read below
	// is inside skb->len, so none of them ends the program.
	add(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, skbLen, asm.Word),
		asm.JLT.Imm(asm.R7, 1, "ret0"),
		asm.Mov.Imm32(asm.R8, 0),
		asm.LoadAbs(0, asm.Byte),
		asm.RSh.Imm(asm.R0, 4),
		asm.JEq.Imm(asm.R0, 6, "v6"),
		asm.JNE.Imm(asm.R0, 4, "ret0"),

		asm.JLT.Imm(asm.R7, 20, "ret0"),
		asm.LoadAbs(12, asm.Word),
		asm.Mov.Reg32(asm.R9, asm.R0),
		asm.LoadAbs(16, asm.Word),
		asm.Add.Reg32(asm.R0, asm.R9), mix,
		asm.LoadAbs(9, asm.Byte),
		asm.Mov.Reg(asm.R9, asm.R0), mix,
		ports("v4_ports"),
		// Not a fragment: flags (but DF) and offset are zero.
		asm.LoadAbs(6, asm.Half).WithSymbol("v4_ports"),
		asm.And.Imm(asm.R0, 0x3fff),
		asm.JNE.Imm(asm.R0, 0, "hashed"),
		asm.LoadAbs(0, asm.Byte),
		asm.And.Imm(asm.R0, 0xf),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R9, asm.R0), // R9: IHL*4
		asm.JLT.Imm(asm.R9, 20, "hashed"),
		asm.Add.Imm(asm.R0, 4),
		asm.JGT.Reg(asm.R0, asm.R7, "hashed"),
		asm.LoadInd(asm.R0, asm.R9, 0, asm.Word), portSum, mix,
		asm.Ja.Label("hashed"),
	)
	add(asm.JLT.Imm(asm.R7, 40, "ret0").WithSymbol("v6"))
	for off := int32(8); off < 24; off += 4 {
		add(
			asm.LoadAbs(off, asm.Word),
			asm.Mov.Reg32(asm.R9, asm.R0),
			asm.LoadAbs(off+16, asm.Word),
			asm.Add.Reg32(asm.R0, asm.R9), mix,
		)
	}
	add(
		asm.LoadAbs(6, asm.Byte),
		asm.Mov.Reg(asm.R9, asm.R0), mix,
		ports("v6_ports"),
		asm.JLT.Imm(asm.R7, 44, "hashed").WithSymbol("v6_ports"),
		asm.LoadAbs(40, asm.Word), portSum, mix,

		// fmix32: R8 is LaneHash. The bulk queue is Lane(h) % n,
		// the flow bucket fmix32(h ^ Seed) % Buckets.
		asm.Mov.Reg32(asm.R0, asm.R8).WithSymbol("hashed"),
	)
	add(fmix,
		asm.Mov.Reg32(asm.R0, asm.R8),
		asm.Mod.Imm32(asm.R0, 254),
		asm.Add.Imm32(asm.R0, 1),
		asm.Mod.Imm32(asm.R0, n),
		asm.StoreMem(asm.RFP, stQueue, asm.R0, asm.Word),
		asm.Xor.Imm32(asm.R8, u32(c.Seed)),
		asm.Mov.Reg32(asm.R0, asm.R8),
		fmix,
		asm.And.Imm32(asm.R8, Buckets-1),
		asm.StoreMem(asm.RFP, stKey, asm.R8, asm.Word),
		lookup,
		asm.Mov.Reg(asm.R9, asm.R0), // R9: the flow bucket
		asm.StoreImm(asm.RFP, stKey, Buckets, asm.Word),
		lookup,
		asm.Mov.Reg(asm.R8, asm.R0),              // R8: the aggregate
		asm.FnKtimeGetNs.Call(),                  // R0: now
		asm.Add.Imm(asm.R7, int32(c.PacketCost)), // R7: the packet's cost in both buckets

		// The flow bucket, as sparseFlows.sparse. R2: the gap since
		// its last packet; the first packet, or a negative gap (a
		// race with another CPU), counts as quiet.
		asm.LoadMem(asm.R1, asm.R9, offLast, asm.DWord),
		asm.StoreMem(asm.R9, offLast, asm.R0, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.R0),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.JEq.Imm(asm.R1, 0, "quiet_gap"),
		asm.JSGE.Imm(asm.R2, 0, "gap"),
		asm.LoadImm(asm.R2, quiet, asm.DWord).WithSymbol("quiet_gap"),
		// A bulk flow stays bulk until it was quiet.
		asm.LoadMem(asm.R3, asm.R9, offBulk, asm.Word).WithSymbol("gap"),
		asm.JEq.Imm(asm.R3, 0, "refill"),
		asm.LoadImm(asm.R4, quiet, asm.DWord),
		asm.JSLT.Reg(asm.R2, asm.R4, "bulk_ret"),
		asm.StoreImm(asm.R9, offBulk, 0, asm.Word),
		// R3: the tokens after the gap, at most Burst.
		asm.LoadImm(asm.R4, refill, asm.DWord).WithSymbol("refill"),
		asm.JSGE.Reg(asm.R2, asm.R4, "full"),
		asm.LoadMem(asm.R3, asm.R9, offTokens, asm.DWord),
		asm.Mul.Imm(asm.R2, int32(c.Rate)),
		asm.Div.Imm(asm.R2, 1e9),
		asm.Add.Reg(asm.R3, asm.R2),
		asm.JSLE.Imm(asm.R3, int32(c.Burst), "tokens"),
		asm.Mov.Imm(asm.R3, int32(c.Burst)).WithSymbol("full"),
		asm.StoreMem(asm.R9, offTokens, asm.R3, asm.DWord).WithSymbol("tokens"),
		asm.JSLT.Reg(asm.R3, asm.R7, "bulk"),

		// The aggregate. R4 now, R5 the packet's cost in ns.
		asm.Mov.Reg(asm.R4, asm.R0),
		asm.Mov.Reg(asm.R5, asm.R7),
		asm.Mul.Imm(asm.R5, 1e9),
		asm.Add.Imm(asm.R5, int32(c.TotalRate-1)),
		asm.Div.Imm(asm.R5, int32(c.TotalRate)),
	)
	// cilium/ebpf v0.22.0 writes an atomic instruction's immediate (the
	// operation) from Constant before it fills Constant in from the
	// opcode, so AtomicOp.Mem alone comes out as BPF_ADD: set it here.
	cmpxchg := asm.CmpXchg.Mem(asm.R8, asm.R2, asm.DWord, offTAT)
	cmpxchg.Constant = int64(asm.CmpXchg >> 8)
	for i := range casTries {
		base := fmt.Sprintf("agg_base%d", i)
		add(
			asm.LoadMem(asm.R1, asm.R8, offTAT, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.R1),
			asm.JGE.Reg(asm.R2, asm.R4, base),
			asm.Mov.Reg(asm.R2, asm.R4),
			asm.Add.Reg(asm.R2, asm.R5).WithSymbol(base), // R2: the new tat
			asm.Mov.Reg(asm.R3, asm.R2),
			asm.Sub.Reg(asm.R3, asm.R4),
			asm.LoadImm(asm.R0, tolerance, asm.DWord),
			asm.JGT.Reg(asm.R3, asm.R0, "bulk"),
			asm.Mov.Reg(asm.R0, asm.R1),
			cmpxchg,
			asm.JEq.Reg(asm.R0, asm.R1, "sparse"),
		)
	}
	add(
		asm.Ja.Label("bulk"),

		asm.LoadMem(asm.R3, asm.R9, offTokens, asm.DWord).WithSymbol("sparse"),
		asm.Sub.Reg(asm.R3, asm.R7),
		asm.StoreMem(asm.R9, offTokens, asm.R3, asm.DWord),
		asm.Mov.Imm(asm.R0, n),
		asm.Return(),

		asm.StoreImm(asm.R9, offBulk, 1, asm.Word).WithSymbol("bulk"),
		asm.LoadMem(asm.R0, asm.RFP, stQueue, asm.Word).WithSymbol("bulk_ret"),
		asm.Return(),

		asm.Mov.Imm(asm.R0, 0).WithSymbol("ret0"),
		asm.Return(),
	)
	return p.Instructions
}
