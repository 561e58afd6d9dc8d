package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/nodeagent"
	"github.com/bridgehead/bridgehead/nodeagent/kubenode"
)

var errNodePrivileges = errors.New("needs root or CAP_NET_ADMIN (routes, nftables); run it as root or in a pod with hostNetwork and NET_ADMIN")

func setupNode(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "read the catalog from `FILE` (watched for changes)")
	node := fs.String("node", "", "`NAME` of this node in the catalog (default: the host name)")
	confDir := fs.String("cni-conf-dir", nodeagent.DefaultCNIConfDir, "write the CNI config into `DIR`")
	binDir := fs.String("cni-bin-dir", nodeagent.DefaultCNIBinDir, "the runtime's CNI plugin `DIR`")
	pluginsFrom := fs.String("cni-plugins-from", nodeagent.DefaultCNIPluginsFrom, "copy missing CNI plugins from `DIR`")
	ipamDir := fs.String("ipam-data-dir", "", "host-local IPAM state `DIR` (default: the plugin's, /var/lib/cni/networks)")
	bridge := fs.String("bridge", nodeagent.DefaultBridge, "pod bridge `NAME`")
	mtu := fs.Int("mtu", 0, "MTU of the bridge and pod interfaces (0: the plugin's default)")
	coexist := fs.Bool("cni-coexist", false, "write the CNI config even when another CNI's config is in --cni-conf-dir (by default the agent refuses, and says so)")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics on `ADDR` (host:port; empty: off)")
	repair := fs.Duration("repair-interval", nodeagent.DefaultRepairInterval, "check everything against the catalog every `DURATION`")
	kube := fs.Bool("kubernetes", false, "follow the catalog the controller publishes (its own site's nodes, every site's CIDRs and gateways) instead of --config")
	kubeconfig := fs.String("kubeconfig", "", "with --kubernetes: kubeconfig `FILE` (default: the pod's service account)")
	catalogNS := fs.String("catalog-namespace", config.DefaultCatalogNamespace, "with --kubernetes: the controller's `NAMESPACE`, where it publishes the catalog")
	catalogFile := fs.String("catalog-file", nodeagent.DefaultCatalogFile, "with --kubernetes: keep the followed catalog in `FILE` on the host (the node starts from it when the API server is away)")
	serviceCIDRs := fs.String("service-cidrs", "", "with --kubernetes: the cluster's Service `CIDRS`, comma-separated (pod traffic to them is not masqueraded)")
	netPolicy := fs.Bool("network-policy", true, "with --kubernetes: enforce Kubernetes NetworkPolicy on this node's pods (nftables table inet bridgehead-netpol); false removes that table")
	stateFile := fs.String("state-file", nodeagent.DefaultStateFile, "keep the agent's host state (schema version, what it owns) in `FILE`, so a new agent adopts the old one's routes, tables and CNI config without flushing (empty: none)")
	uninstall := fs.Bool("uninstall", false, "remove the agent's routes, nftables table, CNI config and state file, then exit")
	logFormat := fs.String("log-format", "text", "log `FORMAT`: text or json")
	logLevel := fs.String("log-level", "info", "log `LEVEL`: debug, info, warn, error")
	return noArgs(func(std *stdio) error {
		log, err := newLogger(std.err, *logFormat, *logLevel)
		if err != nil {
			return err
		}
		if c, err := currentCaps(); err == nil && !c.has(unix.CAP_NET_ADMIN) {
			return errNodePrivileges
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		defer h.Close()
		routes := nodeagent.NewRoutes(h, nil)
		snat := nodeagent.NewSNAT(func() (*nftables.Conn, error) { return nftables.New() })
		if *uninstall {
			return nodeUninstall(log, routes, snat, *confDir, *stateFile)
		}
		name := *node
		if name == "" {
			if name, err = os.Hostname(); err != nil {
				return usageError{fmt.Errorf("--node not given and no host name: %w", err)}
			}
		}
		ctx, stop := signalContext()
		defer stop()
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		if *metricsListen != "" {
			srv, err := serveNodeMetrics(*metricsListen, reg, log)
			if err != nil {
				return err
			}
			defer srv.Close()
		}
		opts := nodeagent.Options{
			Log: log, Registry: reg, Routes: routes, SNAT: snat,
			Host:       nodeagent.NewHostNet(nil, func() (*nftables.Conn, error) { return nftables.New() }),
			CNIConfDir: *confDir, CNIBinDir: *binDir, CNIPluginsFrom: *pluginsFrom,
			CNI:            nodeagent.CNIOptions{Bridge: *bridge, MTU: *mtu, IPAMDataDir: *ipamDir, Coexist: *coexist},
			RepairInterval: *repair,
			StateFile:      *stateFile, Version: buildVersion(),
		}
		log.Info("starting bridgehead node", "version", buildVersion(), "node", name, "catalog", *cfgPath, "kubernetes", *kube)
		if !*kube {
			agent, err := nodeagent.New(opts)
			if err != nil {
				return err
			}
			return agent.Run(ctx, nodeagent.NewFileSource(ctx, *cfgPath, name, log))
		}
		client, err := kubeClient(*kubeconfig)
		if err != nil {
			return err
		}
		// The Node condition BridgeheadNodeNetwork follows the agent's
		// status, written from the reporter's goroutine.
		// Its Warning Events (a host firewall that drops pod traffic, no
		// br_netfilter) and the Source's go to the Node.
		recorder := nodeRecorder(ctx, client, name)
		cond := kubenode.NewConditionReporter(client, name, log, nil)
		cond.Events = recorder
		opts.Status = cond.Report
		agent, err := nodeagent.New(opts)
		if err != nil {
			return err
		}
		svc, err := parsePrefixList(*serviceCIDRs)
		if err != nil {
			return usageError{fmt.Errorf("--service-cidrs: %w", err)}
		}
		src, err := kubenode.New(ctx, kubenode.Options{Client: client, Node: name, Namespace: *catalogNS,
			Catalog: *catalogFile, ServiceCIDRs: svc, Log: log, Registry: reg, Recorder: recorder, Skipped: cond.ReportSkipped})
		if err != nil {
			return err
		}
		defer src.Wait()
		condDone := make(chan struct{})
		go func() { defer close(condDone); cond.Run(ctx) }()
		defer func() { stop(); <-condDone }()
		npDone := make(chan struct{})
		go func() {
			defer close(npDone)
			if err := kubenode.NetworkPolicy(ctx, kubenode.NetworkPolicyOptions{Client: client, Node: name, Log: log, Registry: reg, Report: cond.ReportNetworkPolicy}, *netPolicy); err != nil {
				log.Error("network policy: not enforced", "err", err)
			}
		}()
		defer func() { stop(); <-npDone }()
		return agent.Run(ctx, src)
	})
}

// nodeUninstall removes what the agent owns on the node; the CNI plugin
// binaries stay, as other CNI users may share them.
func nodeUninstall(log *slog.Logger, routes *nodeagent.Routes, snat *nodeagent.SNAT, confDir, stateFile string) error {
	var errs []error
	n, err := routes.Flush()
	errs = append(errs, err)
	errs = append(errs, snat.Remove())
	errs = append(errs, kubenode.RemoveNetworkPolicyTable())
	conf := confDir + "/" + nodeagent.CNIConfName
	if err := os.Remove(conf); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if stateFile != "" {
		if err := os.Remove(stateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	log.Info("uninstalled bridgehead node", "routesDeleted", n, "table", "inet "+nodeagent.SNATTable, "cniConfig", conf)
	return errors.Join(errs...)
}

func serveNodeMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return srv, nil
}

// kubeClient connects to the API server (in-cluster, or kubeconfig).
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	rc.UserAgent = "bridgehead-node/" + buildVersion()
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return client, nil
}

// nodeRecorder records Events about this node (its Node), until ctx ends.
func nodeRecorder(ctx context.Context, client kubernetes.Interface, node string) record.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	go func() { <-ctx.Done(); b.Shutdown() }()
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "bridgehead-node", Host: node})
}

// parsePrefixList parses a comma-separated list of CIDRs ("" is none).
func parsePrefixList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
