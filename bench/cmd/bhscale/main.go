// Command bhscale measures one real `bridgehead run` against a farm of
// remote gateways (issue #14): the idle cost of 600 sessions (gateway CPU %
// and WAN packets/s) and the handshake storm of a restart (time until
// every session is back, and whether peers refused handshakes). Run it as
// root from the repository root after `make build`:
//
//	go run ./bench/cmd/bhscale -bin ./bin/bridgehead                  # 600 peers, keepalive 25 s
//	go run ./bench/cmd/bhscale -bin ./bin/bridgehead -peers 60 -idle 10s -restarts 1   # smoke
//	go run ./bench/cmd/bhscale -mode reload -bin ./bin/bridgehead -prefixes 100000     # start-up and reload
//
// -mode reload measures start-up, SIGHUP and watcher reloads, RSS and
// idle CPU of one gateway on a catalog of 200 sites x 3 gateways, with no
// peers running (issue #14's load/reload figures).
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
		mode      = fs.String("mode", "storm", "storm: idle cost and restart storm against a peer farm; reload: start-up and reload of a large catalog")
		reloads   = fs.Int("reloads", 3, "reload mode: SIGHUP reloads of a changed file")
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
	if *mode == "reload" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		say := func(format string, args ...any) {
			fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
		idleWin := *idle
		if !flagSet(fs, "idle") {
			idleWin = 10 * time.Second
		}
		rep, err := scale.RunReload(ctx, scale.ReloadOptions{Binary: abs, Gateways: *gateways, Prefixes: *prefixes,
			Idle: idleWin, Reloads: *reloads, Timeout: *timeout, Dir: *dir, Progress: say})
		if rep != nil {
			js, _ := json.MarshalIndent(rep, "", "  ")
			fmt.Fprintf(stdout, "%s\n", js)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bhscale: %v\n", err)
			return 1
		}
		return 0
	} else if *mode != "storm" {
		fmt.Fprintf(stderr, "bhscale: -mode %q: want storm or reload\n", *mode)
		return 2
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

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}
