package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// errReported is returned after a command has already printed its errors.
var errReported = errors.New("problems found")

func cmdCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	cfgPath := fs.String("config", "/etc/bridgehead/bridgehead.yaml", "config file")
	noKey := fs.Bool("skip-private-key", false, "do not check the private key file (checking a config away from its gateway)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{errUnexpectedArgs(fs.Args())}
	}
	cfg, problems, warnings, err := config.CheckFile(*cfgPath, config.CheckOptions{SkipPrivateKey: *noKey})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errReported
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	if len(problems) > 0 {
		fmt.Fprintln(stderr, problems)
		fmt.Fprintf(stderr, "%s: %d problem(s)\n", *cfgPath, len(problems))
		return errReported
	}
	fmt.Fprintf(stdout, "%s: ok: site %s, gateway %s, %d sites, %d gateways, config %s\n",
		cfg.Path, cfg.Site, cfg.Gateway, len(cfg.Sites), countGateways(cfg), cfg.Hash())
	return nil
}

func countGateways(c *config.Config) int {
	n := 0
	for _, s := range c.Sites {
		n += len(s.Gateways)
	}
	return n
}

func cmdRoutes(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("routes", stderr)
	cfgPath := fs.String("config", "/etc/bridgehead/bridgehead.yaml", "config file")
	site := fs.String("site", "", "site whose nodes get the routes (default: the config's own site)")
	format := fs.String("format", "ip", "output format: "+strings.Join(noderoutes.Formats(), ", "))
	iface := fs.String("interface", noderoutes.DefaultInterface, "node interface name for the netplan format")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{errUnexpectedArgs(fs.Args())}
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errReported
	}
	return noderoutes.Render(stdout, cfg, *site, *format, noderoutes.WithInterface(*iface))
}
