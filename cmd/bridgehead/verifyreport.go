package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/verify"
	"github.com/bridgehead/bridgehead/verify/kubenetpol"
	"github.com/bridgehead/bridgehead/verify/kubepeer"
	"github.com/bridgehead/bridgehead/verify/kubereport"
)

// kubeReportFlags are verify's --report and --collect flags.
type kubeReportFlags struct {
	report, collect               bool
	kubeconfig, namespace, format string
	nodeName                      string
	maxAge                        time.Duration
}

// publishReport writes this run into the API server (verify --report),
// bounded by 10 s.
func publishReport(ko kubeReportFlags, site, on string, rep *verify.Report) error {
	node := ko.nodeName
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		var err error
		if node, err = os.Hostname(); err != nil {
			return usageError{fmt.Errorf("--report: no --node-name, no $NODE_NAME and no host name: %w", err)}
		}
	}
	client, err := kubeClient(ko.kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return kubereport.Publish(ctx, client, ko.namespace, verify.NewRecord(site, node, on, time.Now(), rep))
}

// verifyCollect prints the matrix of every published report (verify
// --collect); the sites come from the catalog at cfgPath.
func verifyCollect(stdout, stderr io.Writer, cfgPath, catalogNS string, ko kubeReportFlags, format string) error {
	if format != "table" && format != "json" {
		return usageError{fmt.Errorf("--format %q: want table or json", format)}
	}
	if ko.maxAge < 0 {
		return usageError{fmt.Errorf("--max-age %v: want 0 (never stale) or more", ko.maxAge)}
	}
	client, err := kubeClient(ko.kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var all []config.Site
	if catalogNS != "" {
		if all, err = kubepeer.Sites(ctx, client, catalogNS); err != nil {
			return err
		}
	} else {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return err
		}
		all = cfg.Sites
	}
	var sites []string
	for _, s := range all {
		sites = append(sites, s.Name)
	}
	recs, problems, err := kubereport.Collect(ctx, client, ko.namespace)
	if err != nil {
		return err
	}
	m := verify.BuildMatrix(recs, verify.MatrixOptions{Sites: sites, MaxAge: ko.maxAge, Now: time.Now()})
	if format == "json" {
		if err := m.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		m.WriteTable(stdout)
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "bridgehead verify: left out: %v\n", p)
	}
	// Do the node agents enforce the cluster's NetworkPolicies? (Table:
	// a line under the matrix; JSON: stderr, the matrix stays one
	// document.)
	np := kubenetpol.Report(kubenetpol.Check(ctx, client, time.Now()))
	if format == "json" {
		c := np.Checks[0]
		fmt.Fprintf(stderr, "bridgehead verify: %s: %s %s %s\n", c.Name, c.Result, c.Figure, c.Detail)
	} else {
		fmt.Fprintln(stdout)
		np.WriteTable(stdout)
	}
	if !m.OK() || len(problems) > 0 || !np.OK() {
		return errReported
	}
	return nil
}
