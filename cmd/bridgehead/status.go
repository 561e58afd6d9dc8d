package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/control"
)

// cmdStatus prints the running gateway's status from its control socket.
// It fails (exit 1, after printing) when a remote site is unreachable, so
// scripts and probes can use it as a check.
func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	socket := fs.String("socket", control.DefaultSocket, "control socket of the running gateway")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{errUnexpectedArgs(fs.Args())}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := control.Fetch(ctx, *socket)
	if err != nil {
		return statusError(*socket, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		control.Render(stdout, st, time.Now())
	}
	if !st.AllSites {
		return errReported
	}
	return nil
}

// statusError explains the common ways of not reaching the daemon.
func statusError(socket string, err error) error {
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return fmt.Errorf("is bridgehead running? no control socket at %s", socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("is bridgehead running? nothing listens on %s (stale socket)", socket)
	case errors.Is(err, iofs.ErrPermission):
		return fmt.Errorf("%s: permission denied (the control socket is root-only)", socket)
	}
	return err
}
