// Command bridgehead is the gateway daemon and its tools.
//
//	bridgehead run --config FILE      run the gateway in the foreground
//	bridgehead check --config FILE    validate a config and its address plan
//	bridgehead routes --config FILE --site NAME --format FORMAT
//	                                  print the static routes a site's nodes need
//	bridgehead status [--json]        the running gateway's sites and sessions
//	bridgehead verify --config FILE   check the gateway's paths end to end
//	bridgehead genkey                 print a new private key (base64)
//	bridgehead pubkey < private.key   print the public key of a private key
//	bridgehead version                print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: bridgehead <command> [flags]

commands:
  run --config FILE     run the gateway in the foreground (SIGTERM/SIGINT stop it)
  check --config FILE   validate a config: every problem with file, line and field
  routes --config FILE --site NAME --format ip|networkd|netplan|azure|json
                        print the static routes the nodes of a site need
  status [--json]       show sites, gateways, sessions and drops of the running gateway;
                        exit 1 when a remote site is unreachable
  verify --config FILE [--json] [--timeout D] [--target ADDR]
                        check the running gateway end to end: remote gateways, nodes'
                        kubelet port, path MTU, routes, forwarding, relay; exit 1 on a FAIL
  genkey                print a new base64 private key
  pubkey                read a private key on stdin, print its public key
  version               print the version
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(args[1:], stderr)
	case "check":
		err = cmdCheck(args[1:], stdout, stderr)
	case "routes":
		err = cmdRoutes(args[1:], stdout, stderr)
	case "status":
		err = cmdStatus(args[1:], stdout, stderr)
	case "verify":
		err = cmdVerify(args[1:], stdout, stderr)
	case "genkey":
		err = cmdGenkey(stdout)
	case "pubkey":
		err = cmdPubkey(stdin, stdout)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "bridgehead", buildVersion())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "bridgehead: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, errReported) {
		return 1
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "bridgehead %s: %v\n", args[0], err)
			return 2
		}
		fmt.Fprintf(stderr, "bridgehead %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

type usageError struct{ error }

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			return "dev-" + rev + dirty
		}
	}
	return "dev"
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("bridgehead "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
