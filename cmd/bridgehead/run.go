package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/daemon"
)

func setupRun(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "read the config from `FILE`")
	logFormat := fs.String("log-format", "text", "log `FORMAT`: text or json")
	logLevel := fs.String("log-level", "info", "log `LEVEL`: debug, info, warn, error")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE` (for performance work)")
	express := fs.Bool("express", true, "with false, run without the express lane whatever the config's express says (the express lane: a socket and TUN queue of its own for sparse flows, so they do not wait behind bulk ones at the receiver)")
	lanes := fs.Int("lanes", 0, "run `N` data-path lanes (TUN queues and sockets, 1..64) instead of the config's lanes (default one per CPU)")
	gateway := fs.String("gateway", "", "run as gateway `NAME` of the config's site instead of the config's gateway (one config for a DaemonSet's gateways: --gateway=$(NODE_NAME))")
	var expressPriority *int
	fs.Func("express-priority", "replace the config's expressPriority with `N` (1-99: kernel steering and real-time express threads; 0: off)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 99 {
			return fmt.Errorf("%q is not a priority 0..99", s)
		}
		expressPriority = &n
		return nil
	})
	rekeyAfter := fs.Duration("rekey-after", 0, "rekey sessions after this `DURATION` instead of 2m (for tests; 0 keeps the default)")
	return noArgs(func(std *stdio) error {
		if *lanes < 0 || *lanes > config.MaxLanes {
			return fmt.Errorf("--lanes %d is out of range 1..%d", *lanes, config.MaxLanes)
		}
		log, err := newLogger(std.err, *logFormat, *logLevel)
		if err != nil {
			return err
		}
		// Before anything else: without the privileges every later step
		// fails with a less helpful message.
		if err := checkPrivileges(currentCaps); err != nil {
			return err
		}
		// The first SIGTERM or SIGINT drains the gateway, a second
		// stops it at once.
		ctx, drain, stop := daemon.StopSignals(context.Background(), log)
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
		err = daemon.Run(ctx, daemon.Options{ConfigPath: *cfgPath, Logger: log, Version: buildVersion(), RekeyAfter: *rekeyAfter, Lanes: *lanes, NoExpress: !*express, ExpressPriority: expressPriority,
			Overrides: config.Overrides{Gateway: *gateway}, Drain: drain})
		return configError(fs, err)
	})
}
