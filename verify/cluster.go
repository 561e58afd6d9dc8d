package verify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/config"
)

// ClusterOptions are what RunCluster checks, from a node or a pod of
// Site: the connectivity that seed 003 asks an operator to verify.
type ClusterOptions struct {
	// Config gives the sites' CIDRs; Site is the site this runs in.
	Config *config.Config
	Site   string
	// InPod: run from a pod (egress is SNATed by the node; failures
	// point at the node's rules) rather than from the node.
	InPod bool
	Net   Network
	// Timeout is how long each probe waits for an answer.
	Timeout time.Duration
	// Pods are pod addresses to reach: in other sites through the
	// gateways, in this site directly.
	Pods []netip.Addr
	// Service is a ClusterIP and port (kube-proxy DNATs it).
	Service netip.AddrPort
	// DNS is the cluster DNS service; ClusterDomain its domain
	// (kubernetes.default.svc.DOMAIN is resolved).
	DNS           netip.AddrPort
	ClusterDomain string
	// Egress is an address outside the cluster that answers TCP.
	Egress netip.AddrPort
	// CallbackRelay is the CONNECT relay where the API server's egress
	// lives; NodeAddr this node's address, KubeletPort the kubelet's.
	CallbackRelay netip.AddrPort
	NodeAddr      netip.Addr
	KubeletPort   uint16
	// RelayClient is the TLS client config for a relay with mTLS.
	RelayClient *tls.Config
	// Peers, when set, makes each of Pods a verify pod of the same run:
	// after its echo, it is asked over the peer protocol (UDP PeerPort)
	// which source address it saw, and PodAddr, this pod's own, must
	// arrive unchanged (pod traffic between sites is never SNATed).
	Peers    PeerAsker
	PeerPort uint16
	PodAddr  netip.Addr
	// PeersMissing are the sites where no pod of the run was found
	// (with Peers: a "peers" check fails for each).
	PeersMissing []string
}

// PeerAsker asks a verify peer which source address it sees (PeerSocket).
type PeerAsker interface {
	Hello(ctx context.Context, dst netip.AddrPort, timeout time.Duration) (netip.Addr, time.Duration, error)
}

// RunCluster performs the node or pod checks and returns the report:
// pod (per --pod), service, dns, egress, callback.
func RunCluster(ctx context.Context, o ClusterOptions) *Report {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.KubeletPort == 0 {
		o.KubeletPort = 10250
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = "cluster.local"
	}
	c := &clusterRun{o: o, rep: &Report{}, siteDown: map[string]*prereq{}}
	if o.Peers != nil {
		c.peers()
	}
	c.pods(ctx)
	c.service(ctx)
	c.dns(ctx)
	c.egress(ctx)
	c.callback(ctx)
	return c.rep
}

// clusterRun is the state of one RunCluster, used by one goroutine.
type clusterRun struct {
	o   ClusterOptions
	rep *Report
	// siteDown holds, by site, a failed pod check toward that site:
	// nothing answered there, so checks through that site SKIP.
	siteDown map[string]*prereq
}

// siteOf is the site whose CIDRs (pod CIDRs first) hold a.
func (c *clusterRun) siteOf(a netip.Addr) string {
	for _, pods := range []bool{true, false} {
		for _, s := range c.o.Config.Sites {
			cidrs := s.NodeCIDRs
			if pods {
				cidrs = s.PodCIDRs
			}
			for _, p := range cidrs {
				if p.Contains(a) {
					return s.Name
				}
			}
		}
	}
	return ""
}

// ping sends up to three echoes from the kernel's chosen source.
func (c *clusterRun) ping(ctx context.Context, dst netip.Addr, size int, timeout time.Duration) (time.Duration, error) {
	var lastErr error
	for range 3 {
		rtt, err := c.o.Net.Ping(ctx, netip.Addr{}, dst, size, timeout)
		if err == nil {
			return rtt, nil
		}
		lastErr = err
		var tb *TooBigError
		if isLocalError(err) || errors.As(err, &tb) {
			break
		}
	}
	return 0, lastErr
}

// peers: the run has a pod in every site (its own counted).
func (c *clusterRun) peers() {
	for _, site := range c.o.PeersMissing {
		c.rep.add(Check{Name: "peers", Target: site, Result: Fail, Figure: "no pod of this run",
			Detail: fmt.Sprintf("no pod of this verify run runs in %s, so nothing checks it or from it: the Job's parallelism and completions (two per site), whether a node of %s can run it (kubectl -n bridgehead-verify get pods -o wide; kubectl describe), the node's bridgehead.io/site label", site, site)})
	}
	if len(c.o.PeersMissing) == 0 {
		sites := map[string]bool{c.o.Site: true}
		for _, a := range c.o.Pods {
			sites[c.siteOf(a)] = true
		}
		c.rep.add(Check{Name: "peers", Target: "-", Result: Pass, Figure: fmt.Sprintf("%d other pods, %d sites", len(c.o.Pods), len(sites))})
	}
}

// pods: an ICMP echo to each pod, small then as large as this side's
// link MTU, don't-fragment, so an MTU that shrank on the way shows.
func (c *clusterRun) pods(ctx context.Context) {
	if len(c.o.Pods) == 0 {
		c.rep.add(Check{Name: "pod", Target: "-", Result: Skip, Detail: "no pod to reach: pass --pod ADDR (a pod in each other site and one in this site)"})
		return
	}
	for _, a := range c.o.Pods {
		site := c.siteOf(a)
		how := "via gateways"
		if site == c.o.Site {
			how = "direct"
		}
		chk := Check{Name: "pod", Target: joinNonEmpty("/", site, a.String()) + " " + how}
		if site == "" {
			chk.Result, chk.Target = Fail, a.String()
			chk.Detail = fmt.Sprintf("%s is in no site's CIDRs: not a pod address of this cluster (sites[].podCIDRs)", a)
			c.rep.add(chk)
			continue
		}
		c.rep.add(c.pod(ctx, a, site, how, chk))
	}
}

func (c *clusterRun) pod(ctx context.Context, a netip.Addr, site, how string, chk Check) Check {
	chk = c.podEcho(ctx, a, site, how, chk)
	if c.o.Peers == nil || chk.Result != Pass {
		return chk
	}
	seen, _, err := c.o.Peers.Hello(ctx, netip.AddrPortFrom(a, c.o.PeerPort), c.o.Timeout)
	switch {
	case err != nil:
		chk.Result, chk.Figure = Fail, chk.Figure+", udp no answer"
		chk.Detail = fmt.Sprintf("%s answers ping but not UDP %d (%v): a firewall or NetworkPolicy between the pods, or the node agent's rules on either node (nft list ruleset)",
			a, c.o.PeerPort, err)
	case c.o.PodAddr.IsValid() && seen != c.o.PodAddr:
		chk.Result, chk.Figure = Fail, chk.Figure+", source "+c.o.PodAddr.String()+" arrived as "+seen.String()
		chk.Detail = fmt.Sprintf("%s saw this pod's traffic come from %s, not %s: something SNATs pod traffic %s; pods keep their addresses end to end (NetworkPolicy by pod depends on it): the node agent's SNAT rule (nft list table inet bridgehead-node) and any other CNI or firewall on the way",
			a, seen, c.o.PodAddr, how)
	default:
		chk.Figure += ", source kept"
	}
	return chk
}

// podEcho: ICMP echoes to a pod, small then as large as the link MTU.
func (c *clusterRun) podEcho(ctx context.Context, a netip.Addr, site, how string, chk Check) Check {
	rtt, err := c.ping(ctx, a, echoSize, c.o.Timeout)
	if err != nil {
		chk.Result, chk.Figure = Fail, "icmp no reply"
		if how == "direct" {
			chk.Detail = fmt.Sprintf("no echo reply from %s in this site (%v): the pod's node and its bridge, the route to that node's pod range on this node (bridgehead routes --site %s), NetworkPolicy",
				a, err, site)
		} else {
			chk.Detail = fmt.Sprintf("no echo reply from %s in %s through the gateways (%v): are this site's gateways running and up to %s (bridgehead verify on a gateway of %s)? this node's routes to %s (bridgehead routes --site %s)",
				a, site, err, site, c.o.Site, site, c.o.Site)
		}
		c.siteDown[site] = &prereq{check: chk.Name, target: chk.Target}
		return chk
	}
	mtu := 0
	if r, err := c.o.Net.Route(a); err == nil && r.Dev != "" {
		mtu, _ = c.o.Net.LinkMTU(r.Dev)
	}
	if mtu == 0 {
		chk.Result, chk.Figure = Pass, "icmp "+ms(rtt)+", mtu unknown"
		return chk
	}
	timeout := min(c.o.Timeout, time.Second)
	ok := func(size int) bool {
		_, err := c.ping(ctx, a, size, timeout)
		return err == nil
	}
	_, err = c.ping(ctx, a, mtu, timeout)
	if err == nil {
		chk.Result, chk.Figure = Pass, fmt.Sprintf("icmp %s, %d bytes", ms(rtt), mtu)
		return chk
	}
	// A router that says "too big" makes path-MTU discovery work: the
	// path is not a black hole if that size then crosses.
	var tb *TooBigError
	if errors.As(err, &tb) && tb.MTU >= echoSize && tb.MTU < mtu && ok(tb.MTU) {
		chk.Result = Pass
		chk.Figure = fmt.Sprintf("icmp %s, path mtu %d < mtu %d (too-big from %s)", ms(rtt), tb.MTU, mtu, tb.From)
		return chk
	}
	lo, hi := echoSize, mtu // lo passes, hi fails
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	chk.Result, chk.Figure = Fail, fmt.Sprintf("icmp %s, %d bytes < mtu %d", ms(rtt), lo, mtu)
	if how == "direct" {
		chk.Detail = fmt.Sprintf("packets of %d to %d bytes to %s are lost inside this site: the nodes' links carry less than the pods' MTU (%d, from the CNI config)", lo+1, mtu, a, mtu)
	} else {
		chk.Detail = fmt.Sprintf("packets of %d to %d bytes to %s are lost on the way to %s: the pods' MTU (%d, from the CNI config) is more than the tunnel carries; set it to %d or less, or check path-mtu with bridgehead verify on a gateway",
			lo+1, mtu, a, site, mtu, lo)
	}
	return chk
}

// downHint names the sites that nothing answered in, for failures whose
// cause may lie there.
func (c *clusterRun) downHint() string {
	var parts []string
	for _, s := range c.o.Config.Sites {
		if p := c.siteDown[s.Name]; p != nil {
			parts = append(parts, fmt.Sprintf("%s %s failed above: if the backend is in %s, that is the cause", p.check, p.target, s.Name))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

// service: a TCP connect to a ClusterIP, which kube-proxy DNATs to a
// backend pod, possibly in another site.
func (c *clusterRun) service(ctx context.Context) {
	chk := Check{Name: "service", Target: c.o.Service.String()}
	if !c.o.Service.IsValid() {
		c.skipped(chk, "no Service to reach: pass --service CLUSTER-IP:PORT (kubectl get svc)")
		return
	}
	took, err := c.tcpConnect(ctx, c.o.Service)
	switch {
	case err == nil:
		chk.Result, chk.Figure = Pass, "tcp connect "+ms(took)
	case errors.Is(err, syscall.ECONNREFUSED):
		chk.Result, chk.Figure = Fail, "tcp refused"
		chk.Detail = fmt.Sprintf("%s refuses TCP: no ready endpoint behind the Service (kubectl get endpointslices), or kube-proxy has no rule for it on this node", c.o.Service)
	default:
		chk.Result, chk.Figure = Fail, "tcp "+describeDialErr(err)
		chk.Detail = fmt.Sprintf("nothing answers at %s (%v): kube-proxy's DNAT on this node (nft list ruleset, iptables-save -t nat), or its backend pod cannot be reached from here%s",
			c.o.Service, err, c.downHint())
	}
	c.rep.add(chk)
}

// dns: kubernetes.default.svc.DOMAIN through the cluster DNS service.
func (c *clusterRun) dns(ctx context.Context) {
	name := "kubernetes.default.svc." + strings.TrimSuffix(c.o.ClusterDomain, ".")
	chk := Check{Name: "dns", Target: name + " @" + c.o.DNS.String()}
	if !c.o.DNS.IsValid() {
		chk.Target, chk.Result = name, Skip
		chk.Detail = "no cluster DNS service: pass --dns CLUSTER-IP:53 (in a pod, the nameserver of /etc/resolv.conf is used)"
		c.rep.add(chk)
		return
	}
	start := time.Now()
	addrs, err := c.o.Net.Lookup(ctx, c.o.DNS, name, c.o.Timeout)
	took := time.Since(start)
	if err == nil && len(addrs) > 0 {
		var s []string
		for _, a := range addrs {
			s = append(s, a.String())
		}
		chk.Result, chk.Figure = Pass, strings.Join(s, ",")+" in "+ms(took)
		c.rep.add(chk)
		return
	}
	chk.Result = Fail
	var de *net.DNSError
	switch {
	case err == nil || errors.As(err, &de) && de.IsNotFound:
		chk.Figure = "no such name"
		chk.Detail = fmt.Sprintf("the DNS service at %s answers but does not know %s: is the cluster domain %q (--cluster-domain)? does the kubernetes Service exist?", c.o.DNS, name, c.o.ClusterDomain)
	case isTimeout(err) || errors.As(err, &de) && de.IsTimeout:
		chk.Figure = "no answer"
		chk.Detail = fmt.Sprintf("no answer from the cluster DNS service %s in %s: is CoreDNS running (kubectl -n kube-system get pods -l k8s-app=kube-dns)? the service check tells whether ClusterIPs work from here%s",
			c.o.DNS, c.o.Timeout, c.downHint())
	default:
		chk.Figure = "error"
		if errors.As(err, &de) {
			// The resolver names the server it thinks it asked; the
			// inner error is what happened.
			err = errors.New(de.Err)
		}
		chk.Detail = fmt.Sprintf("the cluster DNS service %s: %v: is CoreDNS running and listening (kubectl -n kube-system get pods -l k8s-app=kube-dns; kubectl get endpointslices -n kube-system)?", c.o.DNS, err)
	}
	c.rep.add(chk)
}

// egress: a TCP connect to an address outside the cluster. From a pod
// it leaves with the node's address (SNAT by the node agent).
func (c *clusterRun) egress(ctx context.Context) {
	chk := Check{Name: "egress", Target: c.o.Egress.String()}
	if !c.o.Egress.IsValid() {
		c.skipped(chk, "no outside address: pass --egress ADDR:PORT (something outside the cluster that answers TCP)")
		return
	}
	if s := c.siteOf(c.o.Egress.Addr()); s != "" {
		chk.Result = Fail
		chk.Detail = fmt.Sprintf("%s is inside site %s's CIDRs, not outside the cluster: pass an outside address", c.o.Egress.Addr(), s)
		c.rep.add(chk)
		return
	}
	took, err := c.tcpConnect(ctx, c.o.Egress)
	switch {
	case err == nil:
		chk.Result, chk.Figure = Pass, "tcp connect "+ms(took)
	case errors.Is(err, syscall.ECONNREFUSED):
		// Refused is an answer: the path works both ways.
		chk.Result, chk.Figure = Pass, "tcp refused (the path works) "+ms(took)
	case c.o.InPod:
		chk.Result, chk.Figure = Fail, "tcp "+describeDialErr(err)
		chk.Detail = fmt.Sprintf("no answer from %s (%v): a pod reaches outside the cluster with its node's address, SNAT by the node agent; without that rule replies to the pod address are lost: the node agent's egress rule on the node (nft list table inet bridgehead-node; bridgehead node restores it), then the node's default route and firewall",
			c.o.Egress, err)
	default:
		chk.Result, chk.Figure = Fail, "tcp "+describeDialErr(err)
		chk.Detail = fmt.Sprintf("no answer from %s (%v): this node's default route, its firewall, NSG or NAT gateway", c.o.Egress, err)
	}
	c.rep.add(chk)
}

// callback: the API server's egress reaches this node's kubelet. A
// CONNECT through the relay where that egress lives makes the relay dial
// the kubelet, as the API server's logs, exec and port-forward do.
func (c *clusterRun) callback(ctx context.Context) {
	dst := netip.AddrPortFrom(c.o.NodeAddr, c.o.KubeletPort)
	chk := Check{Name: "callback", Target: c.o.CallbackRelay.String() + " -> " + dst.String()}
	switch {
	case !c.o.CallbackRelay.IsValid():
		c.skipped(chk, "no relay given: pass --callback-relay ADDR:PORT, the relay of the site where the API server's egress lives (or run verify on that site's gateway: its node check probes the kubelet port)")
		return
	case !c.o.NodeAddr.IsValid():
		chk.Target, chk.Result = c.o.CallbackRelay.String(), Skip
		chk.Detail = "this node's address is unknown: pass --node-address ADDR (in a pod: the downward API's status.hostIP)"
		c.rep.add(chk)
		return
	}
	if c.siteOf(c.o.CallbackRelay.Addr()) == c.o.Site {
		// The API server's egress is in this site: it reaches this
		// node's kubelet directly, not through the relay (which relays
		// only to other sites' nodes).
		c.rep.add(c.callbackDirect(ctx, dst, chk))
		return
	}
	if p := c.siteDown[c.siteOf(c.o.CallbackRelay.Addr())]; p != nil {
		c.rep.add(p.skip(chk))
		return
	}
	start := time.Now()
	status, err := connect(ctx, c.o.Net, c.o.CallbackRelay, dst, c.o.RelayClient, c.o.Timeout)
	took := time.Since(start)
	var dialErr *relayDialError
	switch {
	case errors.As(err, &dialErr):
		// Not even the relay answered: its gateway, or the way there.
		chk.Result, chk.Figure = Fail, "tcp "+describeDialErr(dialErr.err)
		chk.Detail = fmt.Sprintf("%v: is the relay listening on %s, and is its gateway up (bridgehead status there)? this node reaches it through its own site's gateways", err, c.o.CallbackRelay)
	case isTimeout(err):
		chk.Result, chk.Figure = Fail, fmt.Sprintf("no answer in %s", 4*c.o.Timeout)
		chk.Detail = fmt.Sprintf("the relay got the CONNECT but its dial to %s did not complete: is the kubelet listening on this node's %s, and do this site's routes lead back to the relay's site (bridgehead routes)?", dst, dst)
	case err != nil:
		chk.Result = Fail
		chk.Detail = fmt.Sprintf("%v: is the relay listening on %s? this node's route to it goes through the gateways", err, c.o.CallbackRelay)
	case status != http.StatusOK:
		chk.Result, chk.Figure = Fail, fmt.Sprintf("CONNECT: %d", status)
		chk.Detail = fmt.Sprintf("the relay answered %d for %s: 502 or 504 is its dial to this node's kubelet failing (is the kubelet listening on %s?); 403 is its allowedPorts or CIDRs; see the relay's log", status, dst, dst)
	default:
		chk.Result, chk.Figure = Pass, fmt.Sprintf("CONNECT 200 in %s", ms(took))
	}
	c.rep.add(chk)
}

// callbackDirect: in the site where the API server's egress lives, the
// kubelet is reached directly from the site's network.
func (c *clusterRun) callbackDirect(ctx context.Context, dst netip.AddrPort, chk Check) Check {
	chk.Target = dst.String() + " (direct: the relay's own site)"
	took, err := c.tcpConnect(ctx, dst)
	if err != nil {
		chk.Result, chk.Figure = Fail, "tcp "+describeDialErr(err)
		chk.Detail = fmt.Sprintf("nothing answers at %s (%v): the API server reaches the kubelets of its own site directly: is the kubelet listening there, and does a firewall on the node let the site's network in?", dst, err)
		return chk
	}
	chk.Result, chk.Figure = Pass, "tcp connect "+ms(took)
	return chk
}

// skipped reports chk as skipped, with detail saying what it needs.
func (c *clusterRun) skipped(chk Check, detail string) {
	chk.Target, chk.Result, chk.Detail = "-", Skip, detail
	c.rep.add(chk)
}

// tcpConnect opens a TCP connection to dst and closes it: how long the
// connect took, and its error.
func (c *clusterRun) tcpConnect(ctx context.Context, dst netip.AddrPort) (time.Duration, error) {
	start := time.Now()
	conn, err := c.o.Net.Dial(ctx, netip.Addr{}, dst, c.o.Timeout)
	took := time.Since(start)
	if err == nil {
		conn.Close()
	}
	return took, err
}
