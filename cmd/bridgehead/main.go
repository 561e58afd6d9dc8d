// Command bridgehead is the gateway daemon and its tools. `bridgehead help`
// lists the commands (the table in commands.go); `bridgehead help COMMAND`
// shows a command's flags.
//
// Exit codes: 0 success, 1 failure (the message says why), 2 a usage
// error (unknown command or flag, stray arguments).
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
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	os.Exit(dispatch(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// errReported is returned after a command has already printed its errors.
var errReported = errors.New("problems found")

// usageError marks an error in how the command was called (exit 2).
type usageError struct{ error }

// run runs one CLI invocation and returns its exit code. Every error is
// printed once, on stderr, as "bridgehead COMMAND: message".
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		writeUsage(stderr)
		return 2
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "bridgehead: unknown command %q%s\nrun 'bridgehead help' for the list of commands\n", args[0], suggest(args[0]))
		return 2
	}
	fs, act := c.flagSet()
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(stdout, c)
			return 0
		}
		fmt.Fprintf(stderr, "bridgehead %s: %v\nrun 'bridgehead help %s' for its flags\n", c.name, err, c.name)
		return 2
	}
	err := act(&stdio{in: stdin, out: stdout, err: stderr}, fs.Args())
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errReported):
		return 1
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "bridgehead %s: %v\n", c.name, err)
		return 2
	}
	fmt.Fprintf(stderr, "bridgehead %s: %v\n", c.name, err)
	return 1
}

func errUnexpectedArgs(args []string) error {
	return fmt.Errorf("unexpected arguments: %s", strings.Join(args, " "))
}

// noArgs wraps an action that takes no positional arguments.
func noArgs(f func(std *stdio) error) action {
	return func(std *stdio, args []string) error {
		if len(args) > 0 {
			return usageError{errUnexpectedArgs(args)}
		}
		return f(std)
	}
}

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
