package main

import (
	"io"
	"os"
	"runtime/pprof"

	"github.com/bridgehead/bridgehead/daemon"
)

func cmdRun(args []string, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	cfgPath := fs.String("config", "/etc/bridgehead/bridgehead.yaml", "config file")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for performance work)")
	rekeyAfter := fs.Duration("rekey-after", 0, "rekey sessions after this long instead of 2m (for tests; 0 keeps the default)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{errUnexpectedArgs(fs.Args())}
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	log.Info("starting bridgehead", "version", buildVersion(), "config", *cfgPath)
	return daemon.Run(ctx, daemon.Options{ConfigPath: *cfgPath, Logger: log, Version: buildVersion(), RekeyAfter: *rekeyAfter})
}
