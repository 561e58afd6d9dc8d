package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube"
)

// setupCatalog: `catalog to-resources` turns a config file's catalog into
// Site and Gateway resources (kube.FromConfig), `catalog from-resources`
// turns a file of resources back into a catalog (kube.ToConfig). Both
// validate all or nothing first. The flags are declared on the command's
// flag set, so help lists them; they follow the subcommand and are parsed
// after it.
func setupCatalog(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", "", "`FILE`: the config whose catalog to convert (to-resources), or whose identity and local part to keep (from-resources)")
	fs.StringVar(cfgPath, "c", "", "short for --config")
	resPath := fs.String("file", "", "`FILE` of Site, Gateway and Node resources (from-resources)")
	fs.StringVar(resPath, "f", "", "short for --file")
	rbac := fs.Bool("gateway-rbac", false, "to-resources: also write each gateway's ServiceAccount and ClusterRole (deploy/kubernetes/README.md: admitting a gateway)")
	nodes := fs.Bool("nodes", false, "to-resources: also write the catalog's nodes as Node objects (for a test cluster; kubelets register real ones)")
	return func(std *stdio, args []string) error {
		if len(args) == 0 {
			return usageError{errors.New("needs a subcommand: to-resources or from-resources")}
		}
		sub := args[0]
		if err := fs.Parse(args[1:]); err != nil {
			return usageError{err}
		}
		if fs.NArg() > 0 {
			return usageError{errUnexpectedArgs(fs.Args())}
		}
		switch sub {
		case "to-resources":
			if *cfgPath == "" {
				return usageError{errors.New("to-resources needs --config FILE")}
			}
			return catalogToResources(std, *cfgPath, *nodes, *rbac)
		case "from-resources":
			if *resPath == "" {
				return usageError{errors.New("from-resources needs --file FILE")}
			}
			return catalogFromResources(std, *resPath, *cfgPath)
		default:
			return usageError{fmt.Errorf("unknown subcommand %q: to-resources or from-resources", sub)}
		}
	}
}

func catalogToResources(std *stdio, path string, nodes, rbac bool) error {
	cfg, problems, warnings, err := config.CheckFile(path, config.CheckOptions{SkipPrivateKey: true})
	if err != nil {
		fmt.Fprintln(std.err, err)
		return errReported
	}
	if reportProblems(std, path, problems, warnings) {
		return errReported
	}
	r, err := kube.FromConfig(cfg)
	if err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", path, err)
		return errReported
	}
	if err := kube.WriteObjects(std.out, r.Objects(nodes, rbac)); err != nil {
		fmt.Fprintln(std.err, err)
		return errReported
	}
	return nil
}

func catalogFromResources(std *stdio, path, base string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(std.err, err)
		return errReported
	}
	_, problems, warnings := kube.CheckResources(path, data, config.CheckOptions{})
	if reportProblems(std, path, problems, warnings) {
		return errReported
	}
	r, _, err := kube.Decode(path, data)
	if err != nil {
		fmt.Fprintln(std.err, err)
		return errReported
	}
	if base == "" {
		// No config to merge into: the catalog alone.
		out, err := kube.ToConfig(r, kube.Local{})
		if err == nil {
			err = kube.WriteCatalog(std.out, out)
		}
		if err != nil {
			fmt.Fprintf(std.err, "%s: %v\n", path, err)
			return errReported
		}
		return nil
	}
	baseData, err := os.ReadFile(base)
	if err != nil {
		fmt.Fprintln(std.err, err)
		return errReported
	}
	keep, err := config.Parse(base, baseData)
	if err != nil {
		fmt.Fprintln(std.err, err)
		return errReported
	}
	out, err := kube.ToConfig(r, kube.Local{Site: keep.Site, Gateway: keep.Gateway})
	if err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", path, err)
		return errReported
	}
	merged, err := kube.MergeCatalog(baseData, out)
	if err != nil {
		fmt.Fprintf(std.err, "%s: %v\n", base, err)
		return errReported
	}
	_, err = std.out.Write(merged)
	return err
}

// reportProblems prints warnings and problems; it reports whether there
// were problems.
func reportProblems(std *stdio, path string, problems, warnings config.ErrorList) bool {
	for _, w := range warnings {
		fmt.Fprintf(std.err, "warning: %v\n", w)
	}
	if len(problems) > 0 {
		fmt.Fprintln(std.err, problems)
		fmt.Fprintf(std.err, "%s: %d problem(s)\n", path, len(problems))
		return true
	}
	return false
}
