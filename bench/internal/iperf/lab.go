package iperf

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/ping"
)

// Serve starts the iperf3 server in pod B and waits until it
// listens and pod A reaches pod B end to end (handshakes done), so that
// nothing timed includes the set-up.
func Serve(ctx context.Context, t *lab.Topology, iperf3 string) error {
	srv, err := t.Start("iperf3-server", lab.BNode, nil, iperf3, "-s", "-B", lab.PodB.String(), "-p", "5201")
	if err != nil {
		return err
	}
	if err := lab.WaitFor(ctx, 10*time.Second, func() (bool, error) {
		if done, perr := srv.Exited(); done {
			return false, fmt.Errorf("iperf3 server exited: %v\n%s", perr, srv.LogTail())
		}
		out, _ := t.Exec(ctx, lab.BNode, "ss", "-Hltn", "sport = :5201")
		return strings.TrimSpace(out) != "", nil
	}); err != nil {
		return fmt.Errorf("iperf3 server: %w", err)
	}
	if err := lab.WaitFor(ctx, 15*time.Second, func() (bool, error) {
		r, err := ping.Run(ctx, t.NS(lab.ANode), lab.PodA, lab.PodB, 100*time.Millisecond, 100*time.Millisecond)
		return err == nil && len(r.RTTs) > 0, nil
	}); err != nil {
		return fmt.Errorf("pod A cannot reach pod B: %w", err)
	}
	return nil
}

// Client runs the iperf3 client args (with -J) in pod A, as Run does.
func Client(ctx context.Context, t *lab.Topology, args []string, d time.Duration) (Result, error) {
	return Run(ctx, func(ctx context.Context, args ...string) (string, error) { return t.Exec(ctx, lab.ANode, args...) }, args, d)
}
