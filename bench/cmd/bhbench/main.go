// Command bhbench is the benchmark harness of bridgehead. It builds
// pod A — gateway A — WAN — gateway B — pod B in network namespaces, and
// for each mode (kernel forwarding, bridgehead with each cipher,
// wireguard-go) measures TCP and small-packet UDP throughput, ICMP
// round-trip time idle and under load, and gateway CPU per GB, then
// prints a Markdown table and writes results.json, results.md and
// results.svg. Run it as root from the repository root after `make build`:
//
//	go run ./bench/cmd/bhbench            # full run: 3 runs of 10 s per measurement
//	go run ./bench/cmd/bhbench --quick    # smoke: 1 run, 3 s, kernel + bridgehead aesgcm
//	go run ./bench/cmd/bhbench -gateway-sched fifo:10   # control: gateways' threads real-time
//	go run ./bench/cmd/bhbench -express-priority default,0   # bridgehead twice: its default (the express lane), express lane off
//
// See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/compare"
	"github.com/bridgehead/bridgehead/bench/internal/flood"
	"github.com/bridgehead/bridgehead/bench/internal/flooder"
	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/sched"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	// The flooder of -flood: bhbench runs itself with `ip netns exec` in
	// the flood namespace. Not meant to be run by hand.
	if len(args) > 0 && args[0] == "flood-worker" {
		return flooder.Main(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("bhbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		duration  = fs.Duration("duration", 10*time.Second, "length of each measurement (iperf3 -t rounds up to whole seconds)")
		runs      = fs.Int("runs", 3, "runs of every mode; the report gives the medians")
		modeList  = fs.String("modes", "kernel,bridgehead,wireguard-go", "modes to measure: kernel, bridgehead, wireguard-go (skipped with a note when its binaries are missing, unless named explicitly)")
		ciphers   = fs.String("cipher", "aesgcm,chachapoly", "bridgehead ciphers, comma-separated; each is a column")
		mtu       = fs.Int("mtu", 1420, "MTU of the tunnel interfaces (bridgehead interface.mtu, wg interface)")
		wanMTU    = fs.Int("wan-mtu", 1500, "MTU of the WAN veth between the gateways")
		streams   = fs.Int("streams", 4, "parallel streams of the multi-stream TCP test")
		prefix    = fs.String("prefix", fmt.Sprintf("bhb%d", os.Getpid()), "prefix of the lab's namespaces and interfaces (unique per run)")
		rtList    = fs.String("express-priority", "", "bridgehead express priorities, comma-separated, each a column: default (no flag: the daemon's default, 10 where it has CAP_BPF and CAP_SYS_NICE), 0 (run --express-priority 0: off) or 1..99 (kernel steering of sparse flows and SCHED_FIFO express threads at that priority) (default \"default\")")
		laneList  = fs.String("lanes", "", "bridgehead lane counts (run --lanes), comma-separated; each is a column (default: the daemon's, one per CPU)")
		udpSize   = fs.Int("udp-size", 64, "UDP payload bytes of the small-packet test")
		udpRate   = fs.String("udp-bitrate", "0", "iperf3 -b of the small-packet test (0: as fast as the sender can)")
		pingEvery = fs.Duration("ping-interval", 20*time.Millisecond, "gap between ICMP echo requests")
		out       = fs.String("out", "", "output folder (default bench/results/YYYYMMDD-HHMMSS)")
		binDir    = fs.String("bin", "bin", "folder with the bridgehead binary (make build)")
		wgGo      = fs.String("wireguard-go", "", "wireguard-go binary (default: wireguard-go or wireguard on PATH or in $(go env GOPATH)/bin)")
		quick     = fs.Bool("quick", false, "smoke run: 1 run, 3 s per measurement, modes kernel,bridgehead, cipher aesgcm (explicit flags still win)")
		verbose   = fs.Bool("v", false, "print every command")
		floodMode = fs.Bool("flood", false, "flood measurement instead of the mode comparison: bridgehead only, one TCP stream unflooded, under a garbage flood and under a bad-MAC handshake flood of gateway B (see bench/README.md, Flood)")
		floodPPS  = fs.Float64("flood-pps", 150000, "with -flood: packets per second the flooder aims at")
		floodBat  = fs.Int("flood-batch", 64, "with -flood: datagrams per sendmmsg call of the flooder")
		gwSched   = fs.String("gateway-sched", "", "a control: run every thread of both gateway processes under real-time policy fifo:PRIO or rr:PRIO (1..99), or under the fair policy with a short time slice, slice:MICROSECONDS (Linux 6.12+), while a variant is measured, so that they never wait for a CPU behind iperf3, the pinger or other work (recorded in the results)")
		floodCtl  = fs.Bool("flood-control", false, "with -flood: add a control phase that sends the garbage flood to a closed port of gateway B (the cost of the flood to the machine, without bridgehead)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bhbench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["runs"] {
			*runs = 1
		}
		if !set["duration"] {
			*duration = 3 * time.Second
		}
		if !set["modes"] {
			*modeList = "kernel,bridgehead"
			fmt.Fprintln(stdout, "note: --quick leaves wireguard-go out; --quick --modes kernel,bridgehead,wireguard-go adds it (needs wireguard-go and wg)")
		}
		if !set["cipher"] {
			*ciphers = "aesgcm"
		}
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "bhbench: "+format+"\n", a...)
		return 1
	}
	gatewaySched, err := sched.Parse(*gwSched)
	if err != nil {
		return fail("-gateway-sched: %v", err)
	}
	// Each list is columns; empty is one column with the daemon's default.
	prios, bad := expressList(*rtList)
	if bad != "" {
		return fail("-express-priority: %q is neither default nor a priority 0..99", bad)
	}
	lanes, bad := intList(*laneList, 1, 64)
	if bad != "" {
		return fail("-lanes: %q is not a lane count 1..64", bad)
	}
	if os.Geteuid() != 0 {
		return fail("needs root (network namespaces, TUN devices)")
	}
	if *runs < 1 || *duration < time.Second || *streams < 1 || *udpSize < 16 || *pingEvery <= 0 {
		return fail("want -runs >= 1, -duration >= 1s, -streams >= 1, -udp-size >= 16, -ping-interval > 0")
	}

	var tools modes.Tools
	if tools.Iperf3, err = exec.LookPath("iperf3"); err != nil {
		return fail("iperf3 not found; install it: apt-get update && apt-get install -y iperf3")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fail("ip not found; install iproute2")
	}
	if *floodMode {
		if set["gateway-sched"] {
			return fail("-gateway-sched is a control of the mode comparison, not of -flood")
		}
		if set["express-priority"] {
			return fail("-express-priority makes columns of the mode comparison, not of -flood")
		}
		if set["modes"] && *modeList != modes.Bridgehead {
			return fail("-flood measures bridgehead only; drop -modes or give -modes bridgehead")
		}
		if set["runs"] || set["streams"] || set["udp-size"] || set["udp-bitrate"] || set["ping-interval"] {
			fmt.Fprintln(stdout, "note: -flood makes one run of one TCP stream per phase; -runs, -streams, -udp-*, -ping-interval are ignored")
		}
		cipher := "aesgcm"
		if set["cipher"] {
			cs := splitList(*ciphers)
			if len(cs) != 1 {
				return fail("-flood takes one -cipher")
			}
			cipher = cs[0]
		}
		if *floodPPS <= 0 || *floodBat < 1 || *floodBat > 1024 {
			return fail("want -flood-pps > 0 and 1 <= -flood-batch <= 1024")
		}
		return runFlood(flood.Config{
			Tools:    tools,
			Cipher:   cipher,
			Duration: *duration,
			PPS:      *floodPPS,
			Batch:    *floodBat,
			Control:  *floodCtl,
			TunMTU:   *mtu,
			WANMTU:   *wanMTU,
			Prefix:   *prefix,
			Progress: stdout,
			Verbose:  *verbose,
		}, *binDir, *out, stdout, stderr)
	}

	var variants []modes.Variant
	for _, m := range splitList(*modeList) {
		switch m {
		case modes.Kernel:
			variants = append(variants, modes.Variant{Mode: m})
		case modes.Bridgehead:
			bh, err := filepath.Abs(filepath.Join(*binDir, "bridgehead"))
			if err != nil {
				return fail("%v", err)
			}
			if _, err := os.Stat(bh); err != nil {
				return fail("%s missing: run `make build` in the repository root, or pass -bin", bh)
			}
			tools.Bridgehead = bh
			for _, c := range splitList(*ciphers) {
				for _, n := range lanes {
					for _, p := range prios {
						variants = append(variants, modes.Variant{Mode: m, Cipher: c, Lanes: n, ExpressPriority: p})
					}
				}
			}
		case modes.WireguardGo:
			wg, wgErr := exec.LookPath("wg")
			wgo := findWireguardGo(*wgGo)
			if wgErr != nil || wgo == "" {
				msg := "wireguard-go mode needs wireguard-go (go install golang.zx2c4.com/wireguard@latest) and wg (apt-get install -y wireguard-tools)"
				if set["modes"] {
					return fail("%s", msg)
				}
				fmt.Fprintf(stdout, "note: skipping wireguard-go: %s\n", msg)
				continue
			}
			tools.Wg, tools.WireguardGo = wg, wgo
			variants = append(variants, modes.Variant{Mode: m})
		default:
			return fail("unknown mode %q (want kernel, bridgehead, wireguard-go)", m)
		}
	}
	if len(variants) == 0 {
		return fail("no mode to measure")
	}
	// Columns in a fixed order: kernel first, wireguard-go last.
	slices.SortStableFunc(variants, func(a, b modes.Variant) int { return modeRank(a.Mode) - modeRank(b.Mode) })

	if *out == "" {
		*out = filepath.Join("bench", "results", time.Now().Format("20060102-150405"))
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return fail("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := compare.Config{
		Tools:        tools,
		Variants:     variants,
		Runs:         *runs,
		Duration:     *duration,
		TunMTU:       *mtu,
		WANMTU:       *wanMTU,
		Streams:      *streams,
		UDPSize:      *udpSize,
		UDPBitrate:   *udpRate,
		PingInterval: *pingEvery,
		GatewaySched: gatewaySched,
		OutDir:       outDir,
		Prefix:       *prefix,
		Progress:     stdout,
		Verbose:      *verbose,
	}
	var names []string
	for _, v := range variants {
		names = append(names, v.String())
	}
	fmt.Fprintf(stdout, "bhbench: %d run(s) of %s, %s per measurement, output %s\n", cfg.Runs, strings.Join(names, ", "), cfg.Duration, outDir)
	rep, runErr := compare.Run(ctx, cfg)
	return finish(rep, runErr, outDir, stdout, stderr)
}

// runFlood is bhbench -flood: it completes cfg (binaries, output folder)
// and runs flood.Run. Exit status as for the comparison: 0 when every
// phase was measured, whether or not the targets were met (the report
// says), 1 on a failure, 130 when interrupted.
func runFlood(cfg flood.Config, binDir, out string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "bhbench: "+format+"\n", a...)
		return 1
	}
	bh, err := filepath.Abs(filepath.Join(binDir, "bridgehead"))
	if err != nil {
		return fail("%v", err)
	}
	if _, err := os.Stat(bh); err != nil {
		return fail("%s missing: run `make build` in the repository root, or pass -bin", bh)
	}
	cfg.Tools.Bridgehead = bh
	// The flooder is this binary's flood-worker subcommand (with `go
	// run`, the temporary binary, which lives as long as we do).
	if cfg.Worker, err = os.Executable(); err != nil {
		return fail("cannot find the bhbench binary for the flooder: %v", err)
	}
	if out == "" {
		out = filepath.Join("bench", "results", time.Now().Format("20060102-150405")+"-flood")
	}
	if cfg.OutDir, err = filepath.Abs(out); err != nil {
		return fail("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stdout, "bhbench: flood measurement of bridgehead-%s, %s per phase, flood %.0f packets/s, output %s\n",
		cfg.Cipher, cfg.Duration, cfg.PPS, cfg.OutDir)
	rep, runErr := flood.Run(ctx, cfg)
	return finish(rep, runErr, cfg.OutDir, stdout, stderr)
}

// report is what both measurements produce.
type report interface {
	Markdown() string
	WriteFiles(dir string) ([]string, error)
}

// finish prints the report, writes its files (also after a failed or
// interrupted run, so partial results are kept) and returns the exit
// status: 0, 1 on failure, 130 when interrupted.
func finish(rep report, runErr error, outDir string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, rep.Markdown())
	paths, err := rep.WriteFiles(outDir)
	if err != nil {
		fmt.Fprintf(stderr, "bhbench: writing results: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", strings.Join(paths, ", "))
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			fmt.Fprintln(stderr, "bhbench: interrupted; everything started was cleaned up")
			return 130
		}
		fmt.Fprintf(stderr, "bhbench: %v\n", runErr)
		return 1
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// intList is the comma-separated integers of s, each within lo..hi, or
// the first item that is not (bad); an empty s gives [0], the daemon's
// default.
func intList(s string, lo, hi int) (list []int, bad string) {
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < lo || n > hi {
			return nil, f
		}
		list = append(list, n)
	}
	if len(list) == 0 {
		list = []int{0}
	}
	return list, ""
}

// expressList parses -express-priority: "default" (or an empty list)
// is modes.ExpressDefault, numbers are priorities 0..99.
func expressList(s string) (list []int, bad string) {
	for _, f := range splitList(s) {
		if f == "default" {
			list = append(list, modes.ExpressDefault)
			continue
		}
		l, bad := intList(f, 0, 99)
		if bad != "" {
			return nil, bad
		}
		list = append(list, l...)
	}
	if len(list) == 0 {
		list = []int{modes.ExpressDefault}
	}
	return list, ""
}

func modeRank(m string) int {
	switch m {
	case modes.Kernel:
		return 0
	case modes.Bridgehead:
		return 1
	}
	return 2
}

// findWireguardGo is flag, or wireguard-go / wireguard (the name `go
// install golang.zx2c4.com/wireguard@latest` gives it) on PATH or in the
// Go bin folder; "" when none is found.
func findWireguardGo(flagValue string) string {
	if flagValue != "" {
		if p, err := exec.LookPath(flagValue); err == nil {
			return p
		}
		return ""
	}
	for _, n := range []string{"wireguard-go", "wireguard"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	var dirs []string
	if gb := os.Getenv("GOBIN"); gb != "" {
		dirs = append(dirs, gb)
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		for _, d := range filepath.SplitList(gp) {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		for _, n := range []string{"wireguard-go", "wireguard"} {
			p := filepath.Join(d, n)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	return ""
}
