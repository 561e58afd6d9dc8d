package bench

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Flood kinds as `bhbench flood-worker -kind` takes them.
const (
	// FloodGarbage is datagrams no gateway should accept: random bytes,
	// runts, and transport-looking messages for sessions that do not
	// exist.
	FloodGarbage = "garbage"
	// FloodBadMAC is well-formed handshake initiations (type 1, 148
	// bytes) whose mac1 is random, so wrong.
	FloodBadMAC = "badmac"
)

// Sizes of the wire format (crypto/doc.go), repeated here so that the
// flooder does not depend on the package it attacks.
const (
	floodInitiationSize = 148 // type 1 reserved 3 sender 4 noise 108 mac1 16 mac2 16
	floodMAC1Off        = 116
	floodMAC2Off        = 132
	floodTransportMin   = 32 // header 16 + tag 16
	floodMaxSize        = 1400
)

// Garbage is a mix, in eighths of the datagrams: 4/8 random bytes of a
// random size in 1..1400 (any first byte), 1/8 runts of 1..3 bytes, 3/8
// transport-looking messages (type 4, reserved zero, random receiver index
// and counter, random body) of 32..1400 bytes.
const (
	garbageRandomEighths    = 4
	garbageRuntEighths      = 1
	garbageTransportEighths = 3
)

// GarbagePacket returns the i-th datagram of a garbage flood, its content
// drawn from rng. Which of the three shapes it has depends on i only, so
// the mix is exact over every 8 consecutive packets.
func GarbagePacket(rng *rand.Rand, i int) []byte {
	switch k := i % 8; {
	case k < garbageRandomEighths:
		b := make([]byte, 1+rng.IntN(floodMaxSize))
		fillRandom(rng, b)
		return b
	case k < garbageRandomEighths+garbageRuntEighths:
		b := make([]byte, 1+rng.IntN(3))
		fillRandom(rng, b)
		return b
	default:
		b := make([]byte, floodTransportMin+rng.IntN(floodMaxSize-floodTransportMin+1))
		fillRandom(rng, b)
		b[0], b[1], b[2], b[3] = 4, 0, 0, 0
		return b
	}
}

// BadMACInitiation returns a handshake initiation that passes every check
// before mac1: type 1, reserved zero, 148 bytes, a random sender index and
// a random Noise body, then a random mac1 and a zero mac2 (as an initiator
// without a cookie sends).
func BadMACInitiation(rng *rand.Rand) []byte {
	b := make([]byte, floodInitiationSize)
	fillRandom(rng, b[:floodMAC2Off])
	b[0], b[1], b[2], b[3] = 1, 0, 0, 0
	return b
}

func fillRandom(rng *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, rng.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// floodPool is the datagrams a flooder cycles through. Generating every
// datagram afresh would cost the flooder CPU that the gateway and the
// measured stream share on a small machine; instead a pool of distinct
// datagrams is made once and, before each send, their index field (bytes
// 4..8: receiver index of a transport message, sender index of an
// initiation) gets a new random value.
func floodPool(kind string, n int, seed uint64) ([][]byte, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pool := make([][]byte, n)
	for i := range pool {
		switch kind {
		case FloodGarbage:
			pool[i] = GarbagePacket(rng, i)
		case FloodBadMAC:
			pool[i] = BadMACInitiation(rng)
		default:
			return nil, fmt.Errorf("unknown flood kind %q (want %s or %s)", kind, FloodGarbage, FloodBadMAC)
		}
	}
	return pool, nil
}

// tokenBucket paces the flooder: rate tokens per second accumulate up to
// burst, and a datagram costs one. A flooder that falls behind (not given
// the CPU) loses what exceeds burst instead of catching up later.
type tokenBucket struct {
	rate, burst, tokens float64
	last                time.Time
	// lost counts the tokens that overflowed burst: datagrams not sent
	// because the flooder was not running when they were due.
	lost float64
}

func newTokenBucket(rate, burst float64, now time.Time) *tokenBucket {
	return &tokenBucket{rate: rate, burst: burst, last: now}
}

func (b *tokenBucket) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens += dt * b.rate
		if b.tokens > b.burst {
			b.lost += b.tokens - b.burst
			b.tokens = b.burst
		}
	}
	b.last = now
}

// take removes up to n tokens and returns how many it removed.
func (b *tokenBucket) take(now time.Time, n int) int {
	b.refill(now)
	k := min(n, int(b.tokens))
	b.tokens -= float64(k)
	return k
}

// wait is how long until n tokens are there.
func (b *tokenBucket) wait(n int) time.Duration {
	if b.tokens >= float64(n) {
		return 0
	}
	return time.Duration((float64(n) - b.tokens) / b.rate * float64(time.Second))
}

// FloodResult is what a flood worker reports: the datagrams the kernel
// accepted from it (sendmmsg's count), over how long, and its own CPU time.
type FloodResult struct {
	Kind       string  `json:"kind"`
	To         string  `json:"to"`
	TargetPPS  float64 `json:"target_pps"`
	Sent       uint64  `json:"sent"`
	Bytes      uint64  `json:"bytes"`
	SendErrors uint64  `json:"send_errors"`
	// Behind is the datagrams the pacing dropped because they were due
	// while the flooder did not run (more than 10 ms late): a flooder
	// short of CPU shows here, not as a burst later.
	Behind   uint64  `json:"behind_schedule"`
	Seconds  float64 `json:"seconds"`
	PPS      float64 `json:"pps"`
	CPUUserS float64 `json:"cpu_user_s"`
	CPUSysS  float64 `json:"cpu_sys_s"`
}

// FloodWorkerOptions configure one flood.
type FloodWorkerOptions struct {
	To       netip.AddrPort
	PPS      float64
	Kind     string
	Duration time.Duration
	// Batch is the datagrams per sendmmsg call.
	Batch int
	// Pool is the number of distinct datagrams cycled through.
	Pool int
	Seed uint64
}

// SendFlood sends datagrams of o.Kind to o.To at o.PPS for o.Duration, in
// sendmmsg batches from a connected UDP socket, and reports what it sent.
// It stops early, with what it has, when stop is closed.
func SendFlood(o FloodWorkerOptions, stop <-chan struct{}) (FloodResult, error) {
	res := FloodResult{Kind: o.Kind, To: o.To.String(), TargetPPS: o.PPS}
	if o.Batch < 1 {
		o.Batch = 64
	}
	if o.Pool < o.Batch {
		o.Pool = max(o.Batch, 8192)
	}
	if o.PPS <= 0 || o.Duration <= 0 || !o.To.Addr().Is4() {
		return res, fmt.Errorf("flood: want -pps > 0, -duration > 0 and an IPv4 -to address")
	}
	pool, err := floodPool(o.Kind, o.Pool, o.Seed)
	if err != nil {
		return res, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return res, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	// A large send buffer so that a burst waits in the socket rather
	// than fails; the blocking socket then paces itself on a slow path.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(o.To.Port()), Addr: o.To.Addr().As4()}); err != nil {
		return res, fmt.Errorf("connect %s: %w", o.To, err)
	}
	hdrs := make([]unix.Mmsghdr, o.Batch)
	iovs := make([]unix.Iovec, o.Batch)
	for i := range hdrs {
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	rng := rand.New(rand.NewPCG(o.Seed+1, o.Seed+2))

	var ru0 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	start := time.Now()
	end := start.Add(o.Duration)
	// Ten milliseconds of tokens: enough to ride over the runtime's
	// millisecond sleeps, little enough that the rate holds per 10 ms.
	tb := newTokenBucket(o.PPS, max(float64(o.Batch), o.PPS/100), start)
	next := 0
loop:
	for now := start; now.Before(end); now = time.Now() {
		select {
		case <-stop:
			break loop
		default:
		}
		if tb.refill(now); tb.tokens < float64(o.Batch) {
			time.Sleep(max(tb.wait(o.Batch), 50*time.Microsecond))
			continue
		}
		n := tb.take(now, o.Batch)
		for i := range n {
			b := pool[next]
			next = (next + 1) % len(pool)
			if len(b) >= 8 {
				binary.LittleEndian.PutUint32(b[4:], rng.Uint32())
			}
			iovs[i].Base = unsafe.SliceData(b)
			iovs[i].SetLen(len(b))
		}
		for off := 0; off < n; {
			r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd),
				uintptr(unsafe.Pointer(&hdrs[off])), uintptr(n-off), 0, 0, 0)
			switch errno {
			case 0:
				for i := off; i < off+int(r); i++ {
					res.Bytes += uint64(hdrs[i].Len)
				}
				res.Sent += uint64(r)
				off += int(r)
			case unix.EINTR:
			default:
				// ENOBUFS, ECONNREFUSED (an ICMP error came back): the
				// first datagram is lost, count it and go on.
				res.SendErrors++
				off++
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.Behind = uint64(tb.lost)
	var ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	res.CPUUserS = tvSeconds(ru1.Utime) - tvSeconds(ru0.Utime)
	res.CPUSysS = tvSeconds(ru1.Stime) - tvSeconds(ru0.Stime)
	if res.Seconds > 0 {
		res.PPS = float64(res.Sent) / res.Seconds
	}
	return res, nil
}

func tvSeconds(tv unix.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// FloodWorkerMain is `bhbench flood-worker`: the flooder the harness runs
// in the flood namespace with `ip netns exec`. It prints one JSON line, a
// FloodResult, and exits after -duration (or on SIGTERM/SIGINT, with what
// it sent so far).
func FloodWorkerMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bhbench flood-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		to       = fs.String("to", "", "destination ADDR:PORT (IPv4)")
		pps      = fs.Float64("pps", 150000, "datagrams per second to send")
		kind     = fs.String("kind", FloodGarbage, "garbage or badmac")
		duration = fs.Duration("duration", 10*time.Second, "how long to send")
		batch    = fs.Int("batch", 64, "datagrams per sendmmsg call")
		seed     = fs.Uint64("seed", 0, "random seed (0: from the time)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ap, err := netip.ParseAddrPort(*to)
	if err != nil {
		fmt.Fprintf(stderr, "flood-worker: -to: %v\n", err)
		return 2
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() { <-sig; close(stop) }()
	res, err := SendFlood(FloodWorkerOptions{To: ap, PPS: *pps, Kind: *kind, Duration: *duration, Batch: *batch, Seed: *seed}, stop)
	if err != nil {
		fmt.Fprintf(stderr, "flood-worker: %v\n", err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(b))
	return 0
}

// ParseFloodResult finds the worker's JSON line in its output (the last
// line that parses).
func ParseFloodResult(out []byte) (FloodResult, error) {
	var last error = errors.New("flood worker printed no result")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var r FloodResult
		if err := json.Unmarshal([]byte(lines[i]), &r); err == nil && r.Kind != "" {
			return r, nil
		} else if err != nil {
			last = fmt.Errorf("flood worker output: %w", err)
		}
	}
	return FloodResult{}, last
}
