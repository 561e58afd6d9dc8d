package main

import (
	"io"

	"github.com/bridgehead/bridgehead/daemon"
)

func cmdRun(args []string, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	cfgPath := fs.String("config", "/etc/bridgehead/bridgehead.yaml", "config file")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
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
	log.Info("starting bridgehead", "version", buildVersion(), "config", *cfgPath)
	return daemon.Run(ctx, daemon.Options{ConfigPath: *cfgPath, Logger: log, Version: buildVersion()})
}
