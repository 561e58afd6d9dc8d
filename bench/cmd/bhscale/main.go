// Command bhscale measures one real `bridgehead run` against a farm of
// remote gateways (issue #14): the idle cost of 600 sessions (gateway CPU %
// and WAN packets/s) and the handshake storm of a restart (time until
// every session is back, and whether peers refused handshakes). Run it as
// root from the repository root after `make build`:
//
//	go run ./bench/cmd/bhscale -bin ./bin/bridgehead                  # 600 peers, keepalive 25 s
//	go run ./bench/cmd/bhscale -bin ./bin/bridgehead -peers 60 -idle 10s -restarts 1   # smoke
//
// It creates a network namespace bhscale<PID> holding the gateway (TUN,
// routes, a loopback UDP socket) and the farm's sockets, and removes it
// when done. Results go to stdout (Markdown) and -out (results.json,
// results.md). See package bench/scale.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/bench/scale"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bhscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		bin       = fs.String("bin", "bin/bridgehead", "bridgehead binary to run")
		peers     = fs.Int("peers", 600, "remote gateways in the farm")
		gateways  = fs.Int("gateways", 3, "gateways per site")
		prefixes  = fs.Int("prefixes", 20000, "pod prefixes in the catalog")
		keepalive = fs.Duration("keepalive", 25*time.Second, "keepalive of every site, both sides (0: none)")
		idle      = fs.Duration("idle", 60*time.Second, "length of the idle measurement")
		restarts  = fs.Int("restarts", 3, "gateway restarts to time")
		timeout   = fs.Duration("timeout", 180*time.Second, "longest wait for all sessions")
		out       = fs.String("out", "bench/results/scale", "directory for results.json and results.md")
		profile   = fs.String("cpuprofile", "", "CPU profile of the first gateway run (start-up and idle) to this file")
		dir       = fs.String("dir", "", "work directory for the catalog and the gateway's log (default: a new temporary one)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "bhscale: needs root (network namespace, TUN)")
		return 1
	}
	abs, err := filepath.Abs(*bin)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bhscale: binary: %v (run make build)\n", err)
		return 1
	}
	ka := *keepalive
	if ka == 0 {
		ka = -1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := scale.Run(ctx, scale.Options{Binary: abs, Peers: *peers, Gateways: *gateways, Prefixes: *prefixes,
		Keepalive: ka, Idle: *idle, Restarts: *restarts, Timeout: *timeout, Dir: *dir, CPUProfile: *profile, Progress: stderr})
	if rep != nil {
		md := rep.Markdown()
		fmt.Fprint(stdout, md)
		if werr := write(*out, rep, md); werr != nil {
			fmt.Fprintf(stderr, "bhscale: %v\n", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "bhscale: %v\n", err)
		return 1
	}
	return 0
}

func write(dir string, rep *scale.Report, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644)
}
