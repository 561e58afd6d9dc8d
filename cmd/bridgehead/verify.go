package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
	"github.com/bridgehead/bridgehead/verify"
	"github.com/bridgehead/bridgehead/verify/kubepeer"
	"github.com/bridgehead/bridgehead/verify/kubereport"
)

// setupVerify declares verify. --on gateway (the default) checks a
// running gateway end to end from its own host: the daemon, remote
// gateways, remote nodes' kubelet port, the path MTU, kernel routes and
// forwarding, the relay. --on node and --on pod check, from a node or a
// pod of a site, what seed 003 asks an operator to verify: pods in other
// sites and in this one, a Service, cluster DNS, egress and the
// callback path. Exit 1 when a check fails.
//
// --report publishes a node or pod run into the API server (one
// ConfigMap per site and node, verify/kubereport); --collect reads every
// published report and prints the cluster's site × check matrix, exit 1
// when a report fails, is stale or a site has none.
func setupVerify(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "config `FILE` (sites and their CIDRs; on a gateway, the gateway's own)")
	on := fs.String("on", "gateway", "where verify runs: `gateway`, node or pod")
	socket := fs.String("socket", "", "control socket `PATH` (default: the config's controlSocket)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 2*time.Second, "how long each probe waits for an answer (`DURATION`)")
	port := fs.Uint("port", 10250, "TCP `PORT` probed on nodes (the kubelet's)")
	var targets targetList
	fs.Var(&targets, "target", "gateway: probe this `ADDR` instead of the config's nodes (repeatable)")
	relayCert := fs.String("relay-cert", "", "client certificate `FILE` for a relay with mTLS")
	relayKey := fs.String("relay-key", "", "client key `FILE` for a relay with mTLS")
	relayCA := fs.String("relay-ca", "", "`FILE` with the CA of the relay's serving certificate")
	var co clusterFlags
	fs.StringVar(&co.site, "site", "", "node, pod: the `SITE` this runs in (default: the config's site)")
	fs.Var(&co.pods, "pod", "node, pod: reach this pod `ADDR`, in another site or this one (repeatable)")
	fs.Var(addrPortFlag{&co.service}, "service", "node, pod: a Service's `CLUSTER-IP:PORT` to connect to (pod default: the kubernetes Service, from KUBERNETES_SERVICE_HOST and _PORT)")
	fs.Var(addrPortFlag{&co.dns}, "dns", "node, pod: the cluster DNS service `ADDR:PORT` (pod default: resolv.conf's nameserver, port 53)")
	fs.StringVar(&co.domain, "cluster-domain", "cluster.local", "node, pod: the cluster `DOMAIN` (kubernetes.default.svc.DOMAIN is resolved)")
	fs.Var(addrPortFlag{&co.egress}, "egress", "node, pod: an `ADDR:PORT` outside the cluster that answers TCP")
	fs.Var(addrPortFlag{&co.relay}, "callback-relay", "node, pod: the relay `ADDR:PORT` of the site where the API server's egress lives")
	fs.Var(addrFlag{&co.node}, "node-address", "node, pod: this node's `ADDR` (node default: a local address in the site's nodeCIDRs)")
	fs.StringVar(&co.catalogNS, "catalog-namespace", "", "node, pod, --collect: read the sites from the catalog the controller publishes in `NAMESPACE` (bridgehead-system) instead of --config; the site is the one whose nodeCIDRs hold --node-address")
	fs.StringVar(&co.peers, "peers", "", "pod: the other pods of this run are the pods of $POD_NAMESPACE matching label `SELECTOR` (one Job over every site); each is reached and must see this pod's own address")
	fs.UintVar(&co.peerPort, "peer-port", verify.DefaultPeerPort, "--peers: the UDP `PORT` the pods of the run answer on")
	fs.DurationVar(&co.peerWait, "peer-wait", 2*time.Minute, "--peers: how long to wait for the run's pods to start, and for them to finish with this one (`DURATION`)")
	fs.Var(addrFlag{&co.podAddr}, "pod-address", "--peers: this pod's `ADDR` (default: $POD_IP)")
	var ko kubeReportFlags
	fs.BoolVar(&ko.report, "report", false, "node, pod: also publish this run into the API server for verify --collect")
	fs.BoolVar(&ko.collect, "collect", false, "print the cluster's site × check matrix from every published report (sites from --config)")
	fs.StringVar(&ko.kubeconfig, "kubeconfig", "", "--report, --collect: kubeconfig `FILE` (default: the pod's service account)")
	fs.StringVar(&ko.namespace, "report-namespace", kubereport.DefaultNamespace, "--report, --collect: the `NAMESPACE` of the reports")
	fs.StringVar(&ko.nodeName, "node-name", "", "--report: this node's `NAME` (default: $NODE_NAME, else the host name)")
	fs.DurationVar(&ko.maxAge, "max-age", time.Hour, "--collect: a report older than `DURATION` is stale (0: never)")
	fs.StringVar(&ko.format, "format", "table", "--collect: `FORMAT` table or json (--json is json)")
	return noArgs(func(std *stdio) error {
		if ko.collect {
			if *on != "gateway" || co.set() || ko.report || len(targets) > 0 || *socket != "" {
				return usageError{fmt.Errorf("--collect reads the published reports; it runs no check (no --on, --report or check flags)")}
			}
			format := ko.format
			if *asJSON {
				format = "json"
			}
			return verifyCollect(std.out, std.err, *cfgPath, co.catalogNS, ko, format)
		}
		if ko.report && *on == "gateway" {
			return usageError{fmt.Errorf("--report goes with --on node or --on pod")}
		}
		var relayClient *tls.Config
		if *relayCert != "" || *relayKey != "" || *relayCA != "" {
			var err error
			if relayClient, err = relayClientTLS(*relayCert, *relayKey, *relayCA); err != nil {
				return err
			}
		}
		switch *on {
		case "gateway":
			if co.set() {
				return usageError{fmt.Errorf("--site, --pod, --service, --dns, --egress, --callback-relay and --node-address go with --on node or --on pod")}
			}
			return verifyGateway(std.out, *cfgPath, *socket, *asJSON, *timeout, *port, targets, relayClient)
		case "node", "pod":
			if len(targets) > 0 || *socket != "" {
				return usageError{fmt.Errorf("--target and --socket go with --on gateway")}
			}
			return verifyCluster(std.out, *cfgPath, *on, *asJSON, *timeout, *port, co, relayClient, ko)
		}
		return usageError{fmt.Errorf("--on %q: want gateway, node or pod", *on)}
	})
}

// clusterFlags are the flags of verify --on node|pod.
type clusterFlags struct {
	site, domain                string
	pods                        targetList
	service, dns, egress, relay netip.AddrPort
	node                        netip.Addr
	catalogNS, peers            string
	peerPort                    uint
	peerWait                    time.Duration
	podAddr                     netip.Addr
}

func (c *clusterFlags) set() bool {
	return c.site != "" || len(c.pods) > 0 || c.service.IsValid() || c.dns.IsValid() || c.egress.IsValid() || c.relay.IsValid() || c.node.IsValid() ||
		c.peers != "" || c.podAddr.IsValid()
}

func verifyCluster(stdout io.Writer, cfgPath, on string, asJSON bool, timeout time.Duration, port uint, co clusterFlags, relayClient *tls.Config, ko kubeReportFlags) error {
	inPod := on == "pod"
	if port == 0 || port > 65535 {
		return usageError{fmt.Errorf("--port %d: want 1-65535", port)}
	}
	if co.peers != "" && !inPod {
		return usageError{fmt.Errorf("--peers goes with --on pod")}
	}
	if co.peerPort == 0 || co.peerPort > 65535 {
		return usageError{fmt.Errorf("--peer-port %d: want 1-65535", co.peerPort)}
	}
	cfg, site, err := verifySites(cfgPath, co, ko.kubeconfig)
	if err != nil {
		return err
	}
	dns := co.dns
	if !dns.IsValid() && inPod {
		if a, err := resolvConfServer("/etc/resolv.conf"); err == nil {
			dns = netip.AddrPortFrom(a, 53)
		}
	}
	service := co.service
	if !service.IsValid() && inPod {
		service = kubernetesService(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	}
	node := co.node
	if !node.IsValid() && !inPod {
		node = localNodeAddr(cfg.SiteByName(site))
	}
	o := verify.ClusterOptions{
		Config: cfg, Site: site, InPod: inPod, Net: verify.SystemNetwork{}, Timeout: timeout,
		Pods: co.pods, Service: service, DNS: dns, ClusterDomain: co.domain, Egress: co.egress,
		CallbackRelay: co.relay, NodeAddr: node, KubeletPort: uint16(port), RelayClient: relayClient,
	}
	var run *peerRun
	if co.peers != "" {
		if run, err = startPeers(stdout, co, ko.kubeconfig, site, cfg.Sites); err != nil {
			return err
		}
		defer run.sock.Close()
		o.Pods = append(o.Pods, run.addrs()...)
		o.Peers, o.PeerPort, o.PodAddr, o.PeersMissing = run.sock, uint16(co.peerPort), run.self, run.missing()
	}
	rep := verify.RunCluster(context.Background(), o)
	var pubErr error
	if ko.report {
		pubErr = publishReport(ko, site, on, rep)
	}
	werr := writeReport(stdout, rep, asJSON)
	if run != nil {
		run.finish(stdout)
	}
	if pubErr != nil {
		return pubErr
	}
	return werr
}

// verifySites are the sites verify checks and the site it runs in: from
// the published catalog (--catalog-namespace; the site by --node-address
// unless --site names it) or the config file.
func verifySites(cfgPath string, co clusterFlags, kubeconfig string) (*config.Config, string, error) {
	if co.catalogNS == "" {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return nil, "", err
		}
		site := co.site
		if site == "" {
			site = cfg.Site
		}
		if cfg.SiteByName(site) == nil {
			return nil, "", usageError{fmt.Errorf("--site %q: %s lists no such site", site, cfgPath)}
		}
		return cfg, site, nil
	}
	client, err := kubeClient(kubeconfig)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sites, err := kubepeer.Sites(ctx, client, co.catalogNS)
	if err != nil {
		return nil, "", err
	}
	cfg := &config.Config{Sites: sites}
	site := co.site
	if site == "" {
		if !co.node.IsValid() {
			return nil, "", usageError{fmt.Errorf("--catalog-namespace: pass --node-address (in a pod: status.hostIP) or --site, so that verify knows its site")}
		}
		if site = kubepeer.SiteOf(sites, co.node); site == "" {
			return nil, "", fmt.Errorf("--node-address %s is in no site's nodeCIDRs of the published catalog: is this node's site a valid Site (kubectl get sites)?", co.node)
		}
	}
	if cfg.SiteByName(site) == nil {
		return nil, "", usageError{fmt.Errorf("--site %q: the published catalog (namespace %s) lists no such site", site, co.catalogNS)}
	}
	return cfg, site, nil
}

func writeReport(stdout io.Writer, rep *verify.Report, asJSON bool) error {
	if asJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		rep.WriteTable(stdout)
	}
	if !rep.OK() {
		return errReported
	}
	return nil
}

// kubernetesService is the kubernetes Service's ClusterIP and port as the
// kubelet puts them in every pod's environment; invalid when unset.
func kubernetesService(host, port string) netip.AddrPort {
	ap, err := netip.ParseAddrPort(net.JoinHostPort(host, port))
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// resolvConfServer is the first nameserver of a resolv.conf: in a pod,
// the cluster DNS service.
func resolvConfServer(path string) (netip.Addr, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				return a.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("%s: no nameserver", path)
}

// localNodeAddr is an address of this host inside the site's nodeCIDRs.
func localNodeAddr(s *config.Site) netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		for _, p := range s.NodeCIDRs {
			if p.Contains(ip.Unmap()) {
				return ip.Unmap()
			}
		}
	}
	return netip.Addr{}
}

// addrPortFlag is a flag holding an IP:port.
type addrPortFlag struct{ p *netip.AddrPort }

func (f addrPortFlag) String() string {
	if f.p == nil || !f.p.IsValid() {
		return ""
	}
	return f.p.String()
}

func (f addrPortFlag) Set(v string) error {
	ap, err := netip.ParseAddrPort(v)
	if err != nil {
		return fmt.Errorf("%q is not ADDR:PORT", v)
	}
	*f.p = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	return nil
}

// addrFlag is a flag holding an IP address.
type addrFlag struct{ a *netip.Addr }

func (f addrFlag) String() string {
	if f.a == nil || !f.a.IsValid() {
		return ""
	}
	return f.a.String()
}

func (f addrFlag) Set(v string) error {
	a, err := netip.ParseAddr(v)
	if err != nil {
		return fmt.Errorf("%q is not an IP address", v)
	}
	*f.a = a.Unmap()
	return nil
}

func verifyGateway(stdout io.Writer, cfgPath, socket string, asJSON bool, timeout time.Duration, port uint,
	targets targetList, relayClient *tls.Config) error {
	if port == 0 || port > 65535 {
		return usageError{fmt.Errorf("--port %d: want 1-65535", port)}
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	sock := socket
	if sock == "" {
		sock = cfg.ControlSocket
		if sock == "" {
			sock = control.DefaultSocket
		}
	}
	o := verify.Options{
		Config: cfg, Net: verify.SystemNetwork{}, Timeout: timeout, Targets: targets, Port: uint16(port),
		Status: func(ctx context.Context) (*control.Status, error) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := control.Fetch(ctx, sock)
			if err != nil {
				return nil, statusError(sock, err)
			}
			return st, nil
		},
	}
	o.RelayClient = relayClient
	return writeReport(stdout, verify.Run(context.Background(), o), asJSON)
}

func relayClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, usageError{fmt.Errorf("--relay-cert, --relay-key and --relay-ca go together")}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// targetList is a repeatable --target flag of IP addresses.
type targetList []netip.Addr

func (t *targetList) String() string {
	var s []string
	for _, a := range *t {
		s = append(s, a.String())
	}
	return strings.Join(s, ",")
}

func (t *targetList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not an IP address", f)
		}
		*t = append(*t, a.Unmap())
	}
	return nil
}
