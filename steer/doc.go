// Package steer sorts the flows the kernel routes into the gateway's
// multi-queue TUN interface into sparse and bulk ones, in the kernel, and
// puts the sparse ones on a queue of their own.
//
// Why: a bulk flow keeps a standing queue in every FIFO it shares. The
// kernel picks a TUN queue by flow hash, so a ping, a DNS query or a small
// request hashed to the queue of a bulk flow waits behind milliseconds of
// it before a lane even reads it; sorting flows after the read
// (package router/sparse) comes too late for that wait. The gateway's TUN has
// n bulk queues, 0..n-1, read by the bulk lanes, and one more, queue n,
// the express queue, read by a real-time thread that seals and sends what
// it reads at once. Program is a TUN steering program
// (TUNSETSTEERINGEBPF, attached with tun.SetSteering): the kernel runs it
// on every packet it routes into the interface and takes the queue it
// returns. It is built with github.com/cilium/ebpf's asm, no compiler
// needed.
//
// The sorting is package router/sparse's, moved into the kernel: each flow
// hash bucket (Buckets of them) is a token bucket, Rate bytes/s with a
// Burst, and a flow whose bucket holds its packet's size is sparse and
// goes to the express queue; one that outgrows it is bulk and goes to
// bulk queue Lane(LaneHash) % n, the same one for all its packets and for
// its replies at the other gateway (hash.go), until it has sent nothing
// for Quiet. Packets the program cannot parse (not IPv4 or
// IPv6, too short) go to queue 0, never to the express queue. The flow
// key is the addresses, the protocol and, for TCP, UDP, SCTP and UDP-Lite
// (not in a later IPv4 fragment or behind an IPv6 extension header), the
// ports; the bucket is keyed by a random seed, so that nobody can aim
// flows at another flow's bucket.
//
// Reordering: a flow becomes bulk when it outgrows its bucket and its
// express packets have left before its first bulk one; it is sparse
// again only after Quiet without a packet, longer than a packet waits in
// the bulk path (a lane's queue, the fair queue), so a flow never
// overtakes its own packets on the way from one queue to the other.
//
// The aggregate: a packet is sparse only if, besides its flow bucket,
// the express queue as a whole has its size, a token bucket of TotalRate
// bytes/s with TotalBurst. That bounds what the real-time reader is ever
// given, however many sparse flows there are (many hosts pinging, a scan).
// A flow the aggregate refuses is marked bulk, as one that outgrew its
// own bucket, so that it does not flip between the queues.
//
// Concurrency in the kernel: the program runs on several CPUs at once,
// and socket filter programs cannot take a bpf_spin_lock. The aggregate is
// one 64-bit word (a GCRA theoretical arrival time) taken with an atomic
// compare-and-exchange, so its cap holds exactly. The flow buckets are
// read and written without atomics: a flow's packets in one direction are
// mostly sent from one CPU at a time (one socket, one sender), and two
// CPUs in one bucket at the same instant cost a mis-count of its tokens
// or its bulk flag (a packet sparse or bulk that should not have been),
// never a crash or a queue out of range.
//
// The interface must have n+1 attached queues: the kernel takes the
// returned queue modulo the number of attached queues, so with the
// express queue detached (tun.DetachQueue) sparse flows land on queue 0.
//
// Why the lane hash is not keyed (issue 35, answered 2026-12-06 with the
// measurement in docs/benchmarks-history.md, "Throughput leads of the
// gateway review"): LaneHash is unkeyed, so whoever can send from a pod
// can pick its bulk flows' lane offline, all on one: one core at each
// gateway. What that buys is small. Sparse flows, the victims that care
// about latency, are not steered by it (their buckets are keyed and the
// express queue is capped as a whole). A bulk flow on the chosen lane
// shares that lane's core; on another lane it keeps its own, and the
// lanes do not slow each other (a lane's CPU per packet measured the
// same with one lane or two working one session). Chance alone puts a victim on the attacker's lane
// one time in n, and a key would not take the choice away: with n lanes
// an attacker finds flows that share one by measuring its own flows'
// throughput, in a few tries. What a key denies is aiming at one given
// victim's lane, a factor of at most n. And a key must be the same at
// both ends to keep the symmetry: one per session (from the Noise
// handshake hash) cannot reach this program, which picks the queue
// before the packet is routed to a site, gateway or session; one per
// gateway (as Seed) breaks the symmetry; one per cluster is a secret
// every gateway must hold and rotate with its config. The symmetry itself
// did not win back throughput when it was added (4c04340), so if a key is
// ever wanted, a random one per gateway, chosen like Seed and read by the
// router from the loaded Program, is the cheap kind: it costs the
// symmetry and nothing measured.
//
// Program is the loaded program and its state map; the caller owns it
// (see Program for concurrency). Load needs CAP_BPF or CAP_SYS_ADMIN and
// Linux 5.12 or later.
package steer
