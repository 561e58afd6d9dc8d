package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/control"
)

// setupStatus declares status, which prints the running gateway's status
// from its control socket. It fails (exit 1, after printing) when a remote
// site is unreachable, so
// scripts and probes can use it as a check.
func setupStatus(fs *flag.FlagSet) action {
	socket := fs.String("socket", control.DefaultSocket, "control socket `PATH` of the running gateway (its controlSocket)")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this `DURATION`")
	var mo meshOptions
	showMesh := fs.Bool("mesh", false, "show the mesh instead: which site reaches which, path, RTT, loss, MTU (from the gateways' /mesh.json, or with --kubernetes from every Gateway); exit 1 when a pair is down")
	fs.Func("endpoint", "with --mesh: a gateway's metrics `ADDR` (host:port or URL) to read its rows from; repeat to merge several gateways (default "+defaultMeshEndpoint+")", func(s string) error {
		mo.endpoints = append(mo.endpoints, s)
		return nil
	})
	fs.BoolVar(&mo.kubernetes, "kubernetes", false, "with --mesh: read every Gateway's published rows from the Kubernetes API (what `kubectl bridgehead mesh` does)")
	fs.StringVar(&mo.kubeconfig, "kubeconfig", "", "with --kubernetes: the kubeconfig `FILE` (default as kubectl: $KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&mo.output, "o", "table", "with --mesh: the output `FORMAT`, table or json")
	fs.BoolVar(&mo.color, "color", false, "with --mesh: colours even when the output is not a terminal")
	fs.BoolVar(&mo.all, "all", false, "with --mesh: list every pair, also in a mesh of more than 60 pairs (which lists only the pairs not up)")
	return noArgs(func(std *stdio) error {
		if *showMesh {
			mo.timeout = *timeout
			return statusMesh(std.out, mo)
		}
		return status(std.out, *socket, *asJSON, *timeout)
	})
}

func status(stdout io.Writer, socket string, asJSON bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := control.Fetch(ctx, socket)
	if err != nil {
		return statusError(socket, err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		control.Render(stdout, st, time.Now())
	}
	if !st.AllSites || st.LAN != "" {
		return errReported
	}
	return nil
}

// statusError explains the common ways of not reaching the daemon.
func statusError(socket string, err error) error {
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return fmt.Errorf("no control socket at %s: is bridgehead running? (if its config sets controlSocket, pass that with --socket PATH)", socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing listens on %s (stale socket): is bridgehead running? (if its config sets controlSocket, pass that with --socket PATH)", socket)
	case errors.Is(err, iofs.ErrPermission):
		return fmt.Errorf("%s: permission denied (the control socket is root-only)", socket)
	}
	return err
}
