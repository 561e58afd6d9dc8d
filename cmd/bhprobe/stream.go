package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

// A stream datagram: flow (uint32), sequence (uint64), send time (unix
// nanoseconds), then padding to -size.
const streamHeader = 4 + 8 + 8

// udpStream sends -flows flows of sequenced datagrams, each from its own
// source port, -rate datagrams per second per flow, for -duration.
func udpStream(args []string) error {
	fs := flag.NewFlagSet("udp-stream", flag.ExitOnError)
	src := fs.String("src", "", "source address")
	rate := fs.Int("rate", 1000, "datagrams per second per flow")
	flows := fs.Int("flows", 1, "flows, each from its own source port")
	size := fs.Int("size", 64, "payload bytes (at least 20)")
	duration := fs.Duration("duration", 10*time.Second, "how long to send")
	fs.Parse(args)
	if fs.NArg() != 1 || *rate <= 0 || *flows <= 0 {
		return fmt.Errorf("udp-stream: want one destination, a positive -rate and -flows")
	}
	dst, err := netip.ParseAddrPort(fs.Arg(0))
	if err != nil {
		return err
	}
	conns := make([]*net.UDPConn, *flows)
	for i := range conns {
		c, err := dialUDP(*src, dst)
		if err != nil {
			return err
		}
		defer c.Close()
		conns[i] = c
	}
	buf := make([]byte, max(*size, streamHeader))
	interval := time.Second / time.Duration(*rate)
	start := time.Now()
	var sent, errs uint64
	for seq := uint64(0); ; seq++ {
		next := start.Add(time.Duration(seq) * interval)
		if next.Sub(start) >= *duration {
			break
		}
		time.Sleep(time.Until(next))
		for f, c := range conns {
			binary.BigEndian.PutUint32(buf[0:4], uint32(f))
			binary.BigEndian.PutUint64(buf[4:12], seq)
			binary.BigEndian.PutUint64(buf[12:20], uint64(time.Now().UnixNano()))
			if _, err := c.Write(buf); err != nil {
				errs++ // an ICMP error while a route changes: keep going
				continue
			}
			sent++
		}
	}
	fmt.Printf("sent %d datagrams in %d flows to %s (%d send errors)\n", sent, *flows, dst, errs)
	return nil
}

// flowStats is what udp-sink reports per flow.
type flowStats struct {
	Received   uint64 `json:"received"`
	Duplicates uint64 `json:"duplicates"`
	Reordered  uint64 `json:"reordered"`
	Lost       uint64 `json:"lost"` // sequence numbers never seen below the highest
	// MaxGapMs is the longest time between two datagrams that arrived
	// in a row, in milliseconds.
	MaxGapMs float64 `json:"maxGapMs"`
	// GapAt is when the longest gap ended (RFC 3339).
	GapAt string `json:"gapAt,omitempty"`

	seen    map[uint64]bool
	highest uint64
	last    time.Time
}

// udpSink receives udp-stream datagrams until -duration passes or it is
// sent SIGTERM/SIGINT, then prints per-flow statistics as JSON.
func udpSink(args []string) error {
	fs := flag.NewFlagSet("udp-sink", flag.ExitOnError)
	listen := fs.String("listen", "", "address:port")
	duration := fs.Duration("duration", time.Minute, "stop after this long")
	fs.Parse(args)
	c, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintln(os.Stderr, "listening", c.LocalAddr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case <-stop:
		case <-time.After(*duration):
		}
		c.SetReadDeadline(time.Now())
	}()
	flows := map[uint32]*flowStats{}
	buf := make([]byte, 65536)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			break
		}
		now := time.Now()
		if n < streamHeader {
			continue
		}
		f := binary.BigEndian.Uint32(buf[0:4])
		seq := binary.BigEndian.Uint64(buf[4:12])
		st := flows[f]
		if st == nil {
			st = &flowStats{seen: map[uint64]bool{}}
			flows[f] = st
		}
		if st.seen[seq] {
			st.Duplicates++
			continue
		}
		st.seen[seq] = true
		st.Received++
		if seq < st.highest {
			st.Reordered++
		}
		st.highest = max(st.highest, seq)
		if !st.last.IsZero() {
			if gap := now.Sub(st.last).Seconds() * 1000; gap > st.MaxGapMs {
				st.MaxGapMs, st.GapAt = gap, now.UTC().Format(time.RFC3339Nano)
			}
		}
		st.last = now
	}
	keys := make([]int, 0, len(flows))
	for f, st := range flows {
		keys = append(keys, int(f))
		st.Lost = st.highest + 1 - st.Received
	}
	sort.Ints(keys)
	out := make(map[string]*flowStats, len(flows))
	for _, f := range keys {
		out[fmt.Sprint(f)] = flows[uint32(f)]
	}
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(out)
}
