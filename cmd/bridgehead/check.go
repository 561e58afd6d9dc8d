package main

import (
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"os"
	"strings"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// defaultConfig is where the package installs the config.
const defaultConfig = "/etc/bridgehead/bridgehead.yaml"

func setupCheck(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "read the config from `FILE`")
	noKey := fs.Bool("skip-private-key", false, "do not check the private key file (checking a config away from its gateway)")
	gateway := fs.String("gateway", "", "check as gateway `NAME` of the config's site, as run --gateway runs it (a DaemonSet's config)")
	return noArgs(func(std *stdio) error {
		if data, err := os.ReadFile(*cfgPath); err == nil && kube.LooksLikeResources(data) {
			return checkResources(std, *cfgPath, data)
		}
		cfg, problems, warnings, err := config.CheckFile(*cfgPath, config.CheckOptions{SkipPrivateKey: *noKey, Overrides: config.Overrides{Gateway: *gateway}})
		if err != nil {
			return configError(fs, err)
		}
		warnings = append(warnings, compatWarnings(*cfgPath, cfg)...)
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

// configError is how a command reports a config file it cannot read: a
// missing file at the default path names the --config flag.
func configError(fs *flag.FlagSet, err error) error {
	var fe *config.FileError
	if errors.As(err, &fe) && errors.Is(fe.Err, iofs.ErrNotExist) && !flagGiven(fs, "config") {
		return fmt.Errorf("%w (the default path; give the config file with --config FILE)", err)
	}
	return err
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// checkResources checks a file of Site, Gateway and Node resources (what
// `catalog to-resources` writes) with the same rules.
func checkResources(std *stdio, path string, data []byte) error {
	cfg, problems, warnings := kube.CheckResources(path, data, config.CheckOptions{})
	if reportProblems(std, path, problems, warnings) {
		return errReported
	}
	nodes := 0
	for _, s := range cfg.Sites {
		nodes += len(s.Nodes)
	}
	fmt.Fprintf(std.out, "%s: ok: resources of %d sites, %d gateways, %d nodes\n", path, len(cfg.Sites), countGateways(cfg), nodes)
	return nil
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
			var fe *config.FileError
			if !errors.As(err, &fe) {
				fmt.Fprintln(std.err, err) // file:line problems, one per line
				return errReported
			}
			return configError(fs, err)
		}
		return noderoutes.Render(std.out, cfg, *site, *format, noderoutes.WithInterface(*iface))
	})
}
