package flooder

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Result is what a flood worker reports: the datagrams the kernel
// accepted from it (sendmmsg's count), over how long, and its own CPU time.
type Result struct {
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

// Options configure one flood.
type Options struct {
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
func Send(o Options, stop <-chan struct{}) (Result, error) {
	res := Result{Kind: o.Kind, To: o.To.String(), TargetPPS: o.PPS}
	if o.Batch < 1 {
		o.Batch = 64
	}
	if o.Pool < o.Batch {
		o.Pool = max(o.Batch, 8192)
	}
	if o.PPS <= 0 || o.Duration <= 0 || !o.To.Addr().Is4() {
		return res, fmt.Errorf("flood: want -pps > 0, -duration > 0 and an IPv4 -to address")
	}
	pool, err := pool(o.Kind, o.Pool, o.Seed)
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

// CPUPct is the flooder's CPU time in percent of one core.
func (f Result) CPUPct() float64 {
	if f.Seconds <= 0 {
		return 0
	}
	return 100 * (f.CPUUserS + f.CPUSysS) / f.Seconds
}
