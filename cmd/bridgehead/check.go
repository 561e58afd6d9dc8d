package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// defaultConfig is where the package installs the config.
const defaultConfig = "/etc/bridgehead/bridgehead.yaml"

func setupCheck(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "read the config from `FILE`")
	noKey := fs.Bool("skip-private-key", false, "do not check the private key file (checking a config away from its gateway)")
	return noArgs(func(std *stdio) error {
		cfg, problems, warnings, err := config.CheckFile(*cfgPath, config.CheckOptions{SkipPrivateKey: *noKey})
		if err != nil {
			fmt.Fprintln(std.err, err)
			return errReported
		}
		for _, w := range warnings {
			fmt.Fprintf(std.err, "warning: %v\n", w)
		}
		if len(problems) > 0 {
			fmt.Fprintln(std.err, problems)
			fmt.Fprintf(std.err, "%s: %d problem(s)\n", *cfgPath, len(problems))
			return errReported
		}
		fmt.Fprintf(std.out, "%s: ok: site %s, gateway %s, %d sites, %d gateways, config %s\n",
			cfg.Path, cfg.Site, cfg.Gateway, len(cfg.Sites), countGateways(cfg), cfg.Hash())
		return nil
	})
}

func countGateways(c *config.Config) int {
	n := 0
	for _, s := range c.Sites {
		n += len(s.Gateways)
	}
	return n
}

func setupRoutes(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "read the config from `FILE`")
	site := fs.String("site", "", "`NAME` of the site whose nodes get the routes (default: the config's own site)")
	format := fs.String("format", "ip", "output `FORMAT`: "+strings.Join(noderoutes.Formats(), ", "))
	iface := fs.String("interface", noderoutes.DefaultInterface, "node interface `NAME` for the netplan format")
	return noArgs(func(std *stdio) error {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintln(std.err, err)
			return errReported
		}
		return noderoutes.Render(std.out, cfg, *site, *format, noderoutes.WithInterface(*iface))
	})
}
