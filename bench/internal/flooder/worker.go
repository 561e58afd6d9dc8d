package flooder

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// FloodWorkerMain is `bhbench flood-worker`: the flooder the harness runs
// in the flood namespace with `ip netns exec`. It prints one JSON line, a
// Result, and exits after -duration (or on SIGTERM/SIGINT, with what
// it sent so far).
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bhbench flood-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		to       = fs.String("to", "", "destination ADDR:PORT (IPv4)")
		pps      = fs.Float64("pps", 150000, "datagrams per second to send")
		kind     = fs.String("kind", Garbage, "garbage or badmac")
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
	res, err := Send(Options{To: ap, PPS: *pps, Kind: *kind, Duration: *duration, Batch: *batch, Seed: *seed}, stop)
	if err != nil {
		fmt.Fprintf(stderr, "flood-worker: %v\n", err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(b))
	return 0
}

// ParseResult finds the worker's JSON line in its output (the last
// line that parses).
func ParseResult(out []byte) (Result, error) {
	var last error = errors.New("flood worker printed no result")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var r Result
		if err := json.Unmarshal([]byte(lines[i]), &r); err == nil && r.Kind != "" {
			return r, nil
		} else if err != nil {
			last = fmt.Errorf("flood worker output: %w", err)
		}
	}
	return Result{}, last
}
