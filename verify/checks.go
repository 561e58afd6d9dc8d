package verify

import (
	"bufio"
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
	"github.com/bridgehead/bridgehead/daemon"
	"github.com/bridgehead/bridgehead/health"
)

// echoSize is the packet size of RTT probes (a default ping).
const echoSize = 84

// minMTU is the smallest packet every IPv4 path carries (IPv6: 1280).
const minMTU4, minMTU6 = 576, 1280

// gateway: the daemon answers on its control socket and runs this file.
func (v *run) gateway(ctx context.Context) {
	c := v.o.Config
	chk := Check{Name: "gateway", Target: c.Gateway + " (" + c.Site + ")"}
	if v.o.Status == nil {
		chk.Result, chk.Detail = Skip, "no control socket given"
		v.rep.add(chk)
		return
	}
	st, err := v.o.Status(ctx)
	if err != nil {
		chk.Result = Fail
		chk.Detail = fmt.Sprintf("cannot read the running gateway's status (%v): is bridgehead running? systemctl status bridgehead; journalctl -u bridgehead", err)
		v.rep.add(chk)
		v.daemonDown = &prereq{check: chk.Name, target: chk.Target}
		return
	}
	v.status = st
	chk.Figure = fmt.Sprintf("config %s, up %s", st.ConfigHash, since(st.Started))
	switch {
	case st.Site != c.Site || st.Gateway != c.Gateway:
		chk.Result = Fail
		chk.Detail = fmt.Sprintf("the socket serves gateway %s of site %s, the file describes %s of %s: wrong --socket or --config", st.Gateway, st.Site, c.Gateway, c.Site)
	case st.ConfigHash != c.Hash():
		chk.Result = Fail
		chk.Detail = fmt.Sprintf("the gateway runs config %s, the file is %s: the last reload was refused or not done; bridgehead check --config %s, then systemctl reload bridgehead", st.ConfigHash, c.Hash(), c.Path)
	default:
		chk.Result = Pass
	}
	v.rep.add(chk)
}

func since(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return time.Since(t).Truncate(time.Second).String()
}

// remoteSites returns the sites other than the local one.
func (v *run) remoteSites() []config.Site {
	var out []config.Site
	for _, s := range v.o.Config.Sites {
		if s.Name != v.o.Config.Site {
			out = append(out, s)
		}
	}
	return out
}

// source is this gateway's LAN address of dst's family: probes leave
// from it so the remote gateway accepts them as coming from this site.
func (v *run) source(dst netip.Addr) netip.Addr {
	gw := v.o.Config.LocalGateway()
	if gw == nil {
		return netip.Addr{}
	}
	if dst.Is4() {
		if gw.Address.Is4() {
			return gw.Address
		}
		return netip.Addr{}
	}
	if gw.Address6.IsValid() {
		return gw.Address6
	}
	if gw.Address.Is6() {
		return gw.Address
	}
	return netip.Addr{}
}

// ping sends up to three echoes and returns the best round trip.
func (v *run) ping(ctx context.Context, dst netip.Addr, size int, timeout time.Duration) (time.Duration, error) {
	var best time.Duration
	var lastErr error
	for range 3 {
		rtt, err := v.o.Net.Ping(ctx, v.source(dst), dst, size, timeout)
		if err != nil {
			lastErr = err
			if isLocalError(err) {
				break
			}
			continue
		}
		if best == 0 || rtt < best {
			best = rtt
		}
		if best > 0 {
			break
		}
	}
	if best > 0 {
		return best, nil
	}
	return 0, lastErr
}

// isLocalError: the probe could not leave this host (too big for the
// interface, no route): retrying is pointless.
func isLocalError(err error) bool {
	return errors.Is(err, syscall.EMSGSIZE) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH)
}

func (v *run) peer(site, gw string) (health.PeerState, bool) {
	if v.status == nil {
		return health.PeerState{}, false
	}
	for _, p := range v.status.Peers {
		if p.Site == site && p.Gateway == gw {
			return p, true
		}
	}
	return health.PeerState{}, false
}

// remoteGateways: a session with each remote gateway, and an ICMP round
// trip to its LAN address through the tunnel. A gateway that fails is a
// prerequisite of the path-MTU check toward it; a site none of whose
// gateways answers, of the checks of its nodes.
func (v *run) remoteGateways(ctx context.Context) {
	v.gwDown, v.siteDown = map[string]*prereq{}, map[string]*prereq{}
	for _, s := range v.remoteSites() {
		var down []string
		up := false
		for _, g := range s.Gateways {
			chk := Check{Name: "remote-gateway", Target: s.Name + "/" + g.Name + " " + g.Address.String()}
			if v.daemonDown != nil {
				v.rep.add(v.daemonDown.skip(chk))
				continue
			}
			chk = v.remoteGateway(ctx, s, g, chk)
			v.rep.add(chk)
			switch chk.Result {
			case Pass:
				up = true
			case Fail:
				v.gwDown[s.Name+"/"+g.Name] = &prereq{check: chk.Name, target: chk.Target}
				down = append(down, chk.Target)
			}
		}
		if !up && len(down) > 0 {
			v.siteDown[s.Name] = &prereq{check: "remote-gateway", target: strings.Join(down, " and ")}
		}
	}
}

// remoteGateway checks one remote gateway g of site s.
func (v *run) remoteGateway(ctx context.Context, s config.Site, g config.Gateway, chk Check) Check {
	p, known := v.peer(s.Name, g.Name)
	hs := "handshake never"
	if known && !p.LastHandshake.IsZero() {
		hs = "handshake " + since(p.LastHandshake) + " ago"
	}
	if known && p.Path != "" {
		// The path the tunnel takes to the gateway: direct, or
		// through which hub gateways (sites behind NAT).
		hs += ", " + p.PathText()
	}
	if !g.Address.IsValid() {
		chk.Result, chk.Figure = Skip, hs
		chk.Detail = "no address listed for this gateway: nothing to ping through the tunnel"
		return chk
	}
	rtt, err := v.ping(ctx, g.Address, echoSize, v.o.Timeout)
	if err == nil {
		chk.Result, chk.Figure = Pass, hs+", rtt "+ms(rtt)
		return chk
	}
	chk.Result, chk.Figure = Fail, hs+", no echo reply"
	switch {
	case known && p.LastHandshake.IsZero():
		chk.Detail = fmt.Sprintf("no session was ever set up: check that UDP reaches %s (firewall, NSG), that the publicKey listed for %s is its key, and that bridgehead runs there", g.Endpoint, g.Name)
	default:
		chk.Detail = fmt.Sprintf("no reply from %s through the tunnel within %s (%v): is bridgehead on %s running? is UDP to %s still open? bridgehead status shows its last packet",
			g.Address, v.o.Timeout, err, g.Name, g.Endpoint)
	}
	return chk
}

// nodeTarget is a node to probe and its site.
type nodeTarget struct {
	site, name string
	addr       netip.Addr
}

func (v *run) nodeTargets() []nodeTarget {
	var out []nodeTarget
	if len(v.o.Targets) > 0 {
		for _, a := range v.o.Targets {
			t := nodeTarget{addr: a, name: a.String()}
			for _, s := range v.o.Config.Sites {
				for _, p := range append(append([]netip.Prefix{}, s.NodeCIDRs...), s.PodCIDRs...) {
					if p.Contains(a) && t.site == "" {
						t.site = s.Name
					}
				}
			}
			out = append(out, t)
		}
		return out
	}
	for _, s := range v.remoteSites() {
		for _, n := range s.Nodes {
			if n.Address.IsValid() {
				out = append(out, nodeTarget{site: s.Name, name: n.Name, addr: n.Address})
			}
			if n.Address6.IsValid() {
				out = append(out, nodeTarget{site: s.Name, name: n.Name, addr: n.Address6})
			}
		}
	}
	return out
}

// nodes: ICMP echo and a TCP connect to the kubelet port of each remote
// node through the tunnel.
func (v *run) nodes(ctx context.Context) {
	targets := v.nodeTargets()
	if len(targets) == 0 {
		for _, s := range v.remoteSites() {
			v.rep.add(Check{Name: "node", Target: s.Name, Result: Skip,
				Detail: "no nodes listed for this site (sites[].nodes); pass --target ADDRESS to probe one"})
		}
		return
	}
	for _, t := range targets {
		chk := Check{Name: "node", Target: joinNonEmpty("/", t.site, t.name) + " " + t.addr.String()}
		if t.name == t.addr.String() {
			chk.Target = joinNonEmpty("/", t.site, t.addr.String())
		}
		switch {
		case t.site == "":
			chk.Result = Fail
			chk.Detail = fmt.Sprintf("%s is in no site's CIDRs: this gateway does not route it; add it to its site's nodeCIDRs", t.addr)
			v.rep.add(chk)
			continue
		case t.site == v.o.Config.Site:
			chk.Result = Skip
			chk.Detail = "a node of this gateway's own site: reached on the LAN, not through the tunnel"
			v.rep.add(chk)
			continue
		case v.daemonDown != nil:
			v.rep.add(v.daemonDown.skip(chk))
			continue
		case v.siteDown[t.site] != nil:
			v.rep.add(v.siteDown[t.site].skip(chk))
			continue
		}
		rtt, perr := v.ping(ctx, t.addr, echoSize, v.o.Timeout)
		dst := netip.AddrPortFrom(t.addr, v.o.Port)
		start := time.Now()
		conn, terr := v.o.Net.Dial(ctx, v.source(t.addr), dst, v.o.Timeout)
		setup := time.Since(start)
		if terr == nil {
			conn.Close()
		}
		icmp, tcp := "icmp no reply", fmt.Sprintf("tcp :%d %s", v.o.Port, describeDialErr(terr))
		if perr == nil {
			icmp = "icmp " + ms(rtt)
		}
		if terr == nil {
			tcp = fmt.Sprintf("tcp :%d %s", v.o.Port, ms(setup))
		}
		chk.Figure = icmp + ", " + tcp
		switch {
		case perr == nil && terr == nil:
			chk.Result = Pass
		case perr != nil && terr != nil:
			chk.Result = Fail
			chk.Detail = fmt.Sprintf("nothing gets through to %s: check remote-gateway above, the node's routes back to %s (bridgehead routes --site %s, on the node) and firewalls in site %s",
				t.addr, v.o.Config.Site, t.site, t.site)
		case errors.Is(terr, syscall.ECONNREFUSED):
			chk.Result = Fail
			chk.Detail = fmt.Sprintf("the path works but %s refuses TCP %d: is the kubelet listening on %s?", t.addr, v.o.Port, dst)
		case terr != nil:
			chk.Result = Fail
			chk.Detail = fmt.Sprintf("ICMP answers but TCP %d does not (%v): a firewall on the node or in site %s drops it; kubectl logs/exec will hang", v.o.Port, terr, t.site)
		default:
			chk.Result = Fail
			chk.Detail = fmt.Sprintf("TCP %d connects but ICMP echo gets no reply: ICMP filtered on the way; path-MTU errors cannot reach senders either", v.o.Port)
		}
		v.rep.add(chk)
	}
}

func describeDialErr(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case isTimeout(err):
		return "timed out"
	}
	return "failed"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// pathMTU finds the largest don't-fragment packet that crosses the
// tunnel to each remote gateway and compares it with the TUN's MTU.
func (v *run) pathMTU(ctx context.Context) {
	c := v.o.Config
	if v.daemonDown != nil {
		v.rep.add(v.daemonDown.skip(Check{Name: "path-mtu", Target: c.Interface.Name}))
		return
	}
	mtu, err := v.o.Net.LinkMTU(c.Interface.Name)
	if err != nil {
		v.rep.add(Check{Name: "path-mtu", Target: c.Interface.Name, Result: Fail,
			Detail: fmt.Sprintf("cannot read the MTU of %s (%v): is the tunnel interface up?", c.Interface.Name, err)})
		return
	}
	for _, s := range v.remoteSites() {
		for _, g := range s.Gateways {
			if !g.Address.IsValid() {
				continue
			}
			if p := v.gwDown[s.Name+"/"+g.Name]; p != nil {
				v.rep.add(p.skip(Check{Name: "path-mtu", Target: s.Name + "/" + g.Name + " " + g.Address.String()}))
				continue
			}
			v.rep.add(v.mtuTo(ctx, s.Name+"/"+g.Name, g, mtu))
		}
	}
}

func (v *run) mtuTo(ctx context.Context, target string, g config.Gateway, mtu int) Check {
	chk := Check{Name: "path-mtu", Target: target + " " + g.Address.String()}
	dst := g.Address
	timeout := min(v.o.Timeout, time.Second)
	ok := func(size int) bool {
		_, err := v.ping(ctx, dst, size, timeout)
		return err == nil
	}
	if ok(mtu) {
		chk.Result, chk.Figure = Pass, fmt.Sprintf("%d bytes = %s mtu %d", mtu, v.o.Config.Interface.Name, mtu)
		return chk
	}
	lo := minMTU4
	if dst.Is6() {
		lo = minMTU6
	}
	if !ok(lo) {
		chk.Result, chk.Figure = Skip, "no reply at any size"
		chk.Detail = "nothing crosses the tunnel to this gateway; see remote-gateway"
		return chk
	}
	hi := mtu // lo passes, hi fails
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	wan := lo + wanOverhead(g)
	chk.Result = Fail
	chk.Figure = fmt.Sprintf("%d bytes < %s mtu %d", lo, v.o.Config.Interface.Name, mtu)
	chk.Detail = fmt.Sprintf("packets of %d to %d bytes are lost (the WAN path carries about %d-byte datagrams, not %d): set interface.mtu to %d, or raise the WAN MTU",
		lo+1, mtu, wan, mtu+wanOverhead(g), lo)
	return chk
}

// wanOverhead is the outer IP and UDP headers and the transport framing
// around an inner packet toward g.
func wanOverhead(g config.Gateway) int {
	return daemon.Overhead(g.EndpointAddr.Addr().Is4())
}

// routes: remote CIDRs go into the TUN, the local site's do not, and the
// local nodes' pod ranges go to their nodes.
func (v *run) routes() {
	c := v.o.Config
	if v.daemonDown != nil {
		v.rep.add(v.daemonDown.skip(Check{Name: "kernel-routes", Target: c.Interface.Name}))
		return
	}
	var bad []string
	n := 0
	for _, s := range c.Sites {
		if s.Name == c.Site {
			for _, p := range append(append([]netip.Prefix{}, s.NodeCIDRs...), s.PodCIDRs...) {
				n++
				if r, err := v.o.Net.Route(p.Addr()); err == nil && r.Dev == c.Interface.Name {
					bad = append(bad, fmt.Sprintf("local %s goes into %s (the gateway would hijack its own site's traffic)", p, c.Interface.Name))
				}
			}
			for _, nd := range s.Nodes {
				for _, pr := range []struct {
					pod  netip.Prefix
					node netip.Addr
				}{{nd.PodCIDR, nd.Address}, {nd.PodCIDR6, nd.Address6}} {
					if !pr.pod.IsValid() || !pr.node.IsValid() {
						continue
					}
					n++
					r, err := v.o.Net.Route(pr.pod.Addr())
					if err != nil || r.Via != pr.node {
						bad = append(bad, fmt.Sprintf("pod range %s of %s goes %s, not via %s", pr.pod, nd.Name, describeRoute(r, err), pr.node))
					}
				}
			}
			continue
		}
		for _, p := range append(append([]netip.Prefix{}, s.NodeCIDRs...), s.PodCIDRs...) {
			n++
			r, err := v.o.Net.Route(p.Addr())
			if err != nil || r.Dev != c.Interface.Name {
				bad = append(bad, fmt.Sprintf("%s of %s goes %s, not into %s", p, s.Name, describeRoute(r, err), c.Interface.Name))
			}
		}
	}
	chk := Check{Name: "kernel-routes", Target: c.Interface.Name, Figure: fmt.Sprintf("%d of %d as configured", n-len(bad), n)}
	if len(bad) == 0 {
		chk.Result = Pass
	} else {
		chk.Result = Fail
		chk.Detail = strings.Join(bad, "; ") + " (ip route get ADDRESS; a more specific route wins; bridgehead restores its own routes on reload)"
	}
	v.rep.add(chk)
}

func describeRoute(r Route, err error) string {
	switch {
	case err != nil:
		return "nowhere (" + err.Error() + ")"
	case r.Via.IsValid():
		return "via " + r.Via.String() + " dev " + r.Dev
	}
	return "dev " + r.Dev
}

// forwarding: the sysctls that let nodes' traffic cross the gateway.
func (v *run) forwarding() {
	keys := []string{"net/ipv4/ip_forward"}
	if v.usesIPv6() {
		keys = append(keys, "net/ipv6/conf/all/forwarding")
	}
	chk := Check{Name: "forwarding", Target: "sysctl", Result: Pass}
	if v.daemonDown != nil {
		// bridgehead sets them at start: not running, they say nothing.
		v.rep.add(v.daemonDown.skip(chk))
		return
	}
	var figs, bad []string
	for _, k := range keys {
		name := strings.ReplaceAll(k, "/", ".")
		val, err := v.o.Net.Sysctl(k)
		if err != nil {
			bad = append(bad, fmt.Sprintf("cannot read %s: %v", name, err))
			continue
		}
		figs = append(figs, name+"="+val)
		if val != "1" {
			bad = append(bad, fmt.Sprintf("%s is %s: the gateway does not forward its nodes' traffic; bridgehead sets it at start, so something reset it (sysctl.d, another agent): sysctl -w %s=1", name, val, name))
		}
	}
	chk.Figure = strings.Join(figs, ", ")
	if len(bad) > 0 {
		chk.Result, chk.Detail = Fail, strings.Join(bad, "; ")
	}
	v.rep.add(chk)
}

func (v *run) usesIPv6() bool {
	for _, s := range v.o.Config.Sites {
		for _, p := range append(append([]netip.Prefix{}, s.NodeCIDRs...), s.PodCIDRs...) {
			if p.Addr().Is6() {
				return true
			}
		}
	}
	return false
}

// relay: a CONNECT to a remote node through the relay gets 200 and a
// working connection.
func (v *run) relay(ctx context.Context) {
	c := v.o.Config
	rl := c.Relay
	if rl == nil {
		v.rep.add(Check{Name: "relay", Target: "-", Result: Skip, Detail: "no relay section in the config"})
		return
	}
	if v.daemonDown != nil {
		v.rep.add(v.daemonDown.skip(Check{Name: "relay", Target: rl.ListenAddr.String()}))
		return
	}
	addr := rl.ListenAddr
	if addr.Addr().IsUnspecified() {
		if gw := c.LocalGateway(); gw != nil && gw.Address.IsValid() {
			addr = netip.AddrPortFrom(gw.Address, addr.Port())
		}
	}
	targets := v.nodeTargets()
	var dst netip.AddrPort
	var dstSite string
	for _, t := range targets {
		if t.site != "" && t.site != c.Site {
			dst, dstSite = netip.AddrPortFrom(t.addr, uint16(rl.AllowedPorts[0])), t.site
			break
		}
	}
	chk := Check{Name: "relay", Target: addr.String()}
	if !dst.IsValid() {
		chk.Result, chk.Detail = Skip, "no remote node to CONNECT to (sites[].nodes or --target)"
		v.rep.add(chk)
		return
	}
	chk.Target += " -> " + dst.String()
	if p := v.siteDown[dstSite]; p != nil {
		v.rep.add(p.skip(chk))
		return
	}
	if rl.TLS != nil && v.o.RelayClient == nil {
		chk.Result, chk.Detail = Skip, "the relay requires client certificates: pass --relay-cert, --relay-key and --relay-ca"
		v.rep.add(chk)
		return
	}
	start := time.Now()
	var tlsConf *tls.Config
	if rl.TLS != nil {
		tlsConf = v.o.RelayClient
	}
	status, err := connect(ctx, v.o.Net, addr, dst, tlsConf, v.o.Timeout)
	took := time.Since(start)
	var dialErr *relayDialError
	switch {
	case errors.As(err, &dialErr):
		chk.Result, chk.Figure = Fail, "tcp "+describeDialErr(dialErr.err)
		chk.Detail = fmt.Sprintf("%v: is the relay listening on %s (bridgehead status shows it)? a firewall between the API server and it?", err, addr)
	case isTimeout(err):
		chk.Result, chk.Figure = Fail, fmt.Sprintf("no answer in %s", 4*v.o.Timeout)
		chk.Detail = fmt.Sprintf("the relay did not answer the CONNECT to %s: it is still dialing, so the node does not answer through the tunnel (node checks above)", dst)
	case err != nil:
		chk.Result = Fail
		chk.Detail = fmt.Sprintf("%v: is the relay listening on %s (bridgehead status shows it)? a firewall between the API server and it?", err, addr)
	case status != http.StatusOK:
		chk.Result, chk.Figure = Fail, fmt.Sprintf("CONNECT: %d", status)
		chk.Detail = fmt.Sprintf("the relay answered %d: see its log line for %s (reason) and bridgehead_relay_refused_total; node checks above say whether the node answers", status, dst)
	default:
		chk.Result, chk.Figure = Pass, fmt.Sprintf("CONNECT 200 in %s", ms(took))
	}
	v.rep.add(chk)
}

// relayDialError is connect failing to reach the relay at all: a timeout
// here is the path to the relay (or the relay's gateway) being down, not
// the relay's own dial being slow.
type relayDialError struct{ err error }

func (e *relayDialError) Error() string { return "cannot connect to the relay: " + e.err.Error() }
func (e *relayDialError) Unwrap() error { return e.err }

// connect sends one CONNECT through the relay at relayAddr (with TLS
// when tlsConf is not nil) and returns its status.
func connect(ctx context.Context, nw Network, relayAddr, dst netip.AddrPort, tlsConf *tls.Config, timeout time.Duration) (int, error) {
	conn, err := nw.Dial(ctx, netip.Addr{}, relayAddr, timeout)
	if err != nil {
		return 0, &relayDialError{err}
	}
	defer conn.Close()
	// The relay answers once its own dial is done: a few round trips.
	conn.SetDeadline(time.Now().Add(4 * timeout))
	if tlsConf != nil {
		conf := tlsConf.Clone()
		if conf.ServerName == "" {
			conf.ServerName = relayAddr.Addr().String()
		}
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			return 0, fmt.Errorf("TLS handshake with the relay: %w", err)
		}
		conn = tc
	}
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: bridgehead-verify\r\n\r\n", dst, dst)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, fmt.Errorf("reading the relay's answer: %w", err)
	}
	return resp.StatusCode, nil
}
