package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
)

// The NAT lab (deploy/lab/nat-lab.sh, issue #20): site A with a public
// endpoint, edge sites E1 and E2 each behind its own NAT router in a
// namespace, their gateways listed without endpoint.

func startNATLab(t *testing.T, env ...string) *lab {
	t.Helper()
	return startLabScript(t, "deploy/lab/nat-lab.sh", []string{"a", "e1", "e2"}, env...)
}

// natPods are the pod addresses of the NAT lab by site.
var natPods = map[string]string{"a": "10.244.1.10", "e1": "10.41.1.10", "e2": "10.42.1.10"}

// TestNATLab proves the topology: the edge gateways are unreachable
// inbound and reach the Internet through their NAT's public address. They
// start their sessions with site A, whose gateway learns their public
// mappings; pods of A and of each edge site reach each other both ways,
// and pods of the two edge sites directly once the hub told each gateway
// the other's mapping (checkDirect); TestNATLabSymmetric has them through
// the hub.
func TestNATLab(t *testing.T) {
	l := startNATLab(t)
	l.checkNATTopology("e1", "203.0.113.11")
	l.checkNATTopology("e2", "203.0.113.12")
	for _, e := range []string{"e1", "e2"} {
		l.waitPing(e, "a", 20*time.Second)
		l.waitPing("a", e, 5*time.Second)
	}
	eps := l.natEndpoints("a")
	// Plain masquerade keeps the source port when it is free.
	for e, want := range map[string]string{"gw-e1": "203.0.113.11:51820", "gw-e2": "203.0.113.12:51820"} {
		if eps[e] != want {
			t.Errorf("gw-a sees %s at %q, want %s (its NAT's mapping)", e, eps[e], want)
		}
	}
	l.checkDirect()
}

// checkDirect: with endpoint-independent NATs on both sides, the edge
// gateways learn each other's mapping from the hub and go direct; a
// 50 MiB transfer between their pods does not touch the hub. When the
// direct path breaks (nftables on E1's NAT drops what goes between the
// NATs), a 1 kHz stream from pod E1 to pod E2 falls back to the hub
// within a second.
func (l *lab) checkDirect() {
	l.t.Helper()
	l.waitPath("e1", "gw-e2", "direct to 203.0.113.12:51820")
	l.waitPath("e2", "gw-e1", "direct to 203.0.113.11:51820")
	l.checkPaths("e1", map[string]string{"gw-a": "direct", "gw-e2": "direct to 203.0.113.12:51820"})
	l.waitPing("e1", "e2", 5*time.Second)
	l.waitPing("e2", "e1", 5*time.Second)
	fwd := func() float64 {
		return metric(l.metrics("a"), `bridgehead_transit_datagrams_total{direction="forwarded"}`)
	}
	before := fwd()
	from := l.transfer("e1-node", natPods["e1"], "e2-node", natPods["e2"], 5001, 50<<20)
	if !strings.HasPrefix(from, natPods["e1"]+":") {
		l.t.Errorf("E2's pod saw the transfer from %s, want pod E1's address", from)
	}
	if d := fwd() - before; d > 200 {
		l.t.Errorf("the hub relayed %v datagrams during a direct transfer", d)
	}

	results := l.sinkAt("e2-node", natPods["e2"], 7300)
	_, streamDone := l.bg("e1-node", filepath.Join(l.bin, "bhprobe"), "udp-stream", "-src", natPods["e1"],
		"-rate", "1000", "-duration", "5s", natPods["e2"]+":7300")
	time.Sleep(1500 * time.Millisecond)
	rules := `table inet bh_nodirect {
	chain block {
		type filter hook forward priority -10;
		ip daddr 203.0.113.12 drop
		ip saddr 203.0.113.12 drop
	}
}`
	c := exec.Command("ip", "netns", "exec", l.ns("e1-nat"), "nft", "-f", "-")
	c.Stdin = strings.NewReader(rules)
	if out, err := c.CombinedOutput(); err != nil {
		l.t.Fatalf("nft in e1-nat: %v\n%s", err, out)
	}
	broken := time.Now()
	l.waitPath("e1", "gw-e2", "via hub site-a/gw-a")
	back := time.Since(broken)
	streamDone()
	st := results()["0"]
	if st.MaxGapMs > 1000 {
		l.t.Errorf("falling back to the hub: longest gap %.0f ms, want under 1000", st.MaxGapMs)
	}
	if st.Duplicates != 0 {
		l.t.Errorf("%d datagrams delivered twice", st.Duplicates)
	}
	l.t.Logf("direct path broken: gw-e1 relays through the hub after at most %s (status polling); longest gap %.0f ms, %d received, %d lost",
		back.Round(time.Millisecond), st.MaxGapMs, st.Received, st.Lost)
}

// waitPath waits until the gateway of site s reports want as its path
// to gateway gw (status --json), for at most 20 s.
func (l *lab) waitPath(s, gw, want string) {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := l.natPaths(s)[gw]
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("gw-%s: path to %s is %q, want %q", s, gw, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// natPaths returns the path the gateway of site s reports to each remote
// gateway, as status shows it.
func (l *lab) natPaths(s string) map[string]string {
	l.t.Helper()
	out, err := l.exec(s+"-gw", filepath.Join(l.bin, "bridgehead"), "status", "--json", "--socket", filepath.Join(l.dir, s+".sock"))
	var st struct {
		Peers []natPeer `json:"peers"`
	}
	if jerr := json.Unmarshal([]byte(out), &st); jerr != nil {
		l.t.Fatalf("status: %v, %v\n%s", err, jerr, out)
	}
	m := map[string]string{}
	for _, p := range st.Peers {
		m[p.Gateway] = p.pathText()
	}
	return m
}

// natPeer is what the NAT tests read of a peer in status --json.
type natPeer struct {
	Site     string   `json:"site"`
	Gateway  string   `json:"gateway"`
	Path     string   `json:"path"`
	Via      []string `json:"via"`
	DirectAt string   `json:"directAt"`
	Live     struct {
		ProbeRTT time.Duration `json:"probeRTT"`
	} `json:"live"`
}

// pathText is the path as status shows it (health.PeerState.PathText).
func (p natPeer) pathText() string {
	switch {
	case p.Path == "hub":
		return "via hub " + strings.Join(p.Via, ", ")
	case p.DirectAt != "":
		return "direct to " + p.DirectAt
	}
	return p.Path
}

// checkPaths: the gateway of site s reports the path to each remote
// gateway (want, by gateway) in status (JSON and table) and metrics,
// with a probe round trip along it.
func (l *lab) checkPaths(s string, want map[string]string) {
	l.t.Helper()
	sock := filepath.Join(l.dir, s+".sock")
	var st struct {
		Peers []natPeer `json:"peers"`
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := l.exec(s+"-gw", filepath.Join(l.bin, "bridgehead"), "status", "--json", "--socket", sock)
		if jerr := json.Unmarshal([]byte(out), &st); jerr != nil {
			l.t.Fatalf("status: %v, %v\n%s", err, jerr, out)
		}
		ok := true
		for _, p := range st.Peers {
			ok = ok && p.Live.ProbeRTT > 0
		}
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	text, _ := l.exec(s+"-gw", filepath.Join(l.bin, "bridgehead"), "status", "--socket", sock)
	metrics := l.metrics(s)
	for _, p := range st.Peers {
		w, ok := want[p.Gateway]
		if !ok {
			continue
		}
		delete(want, p.Gateway)
		got := p.pathText()
		if got != w {
			l.t.Errorf("gw-%s: path to %s is %q, want %q", s, p.Gateway, got, w)
		}
		if p.Live.ProbeRTT <= 0 {
			l.t.Errorf("gw-%s: no probe round trip to %s", s, p.Gateway)
		}
		if !strings.Contains(text, w) {
			l.t.Errorf("gw-%s: status lacks %q:\n%s", s, w, text)
		}
		path := "direct"
		if strings.HasPrefix(w, "via hub") {
			path = "hub"
		}
		if v := metric(metrics, fmt.Sprintf(`bridgehead_peer_path{gateway=%q,path=%q,site=%q}`, p.Gateway, path, p.Site)); v != 1 {
			l.t.Errorf("gw-%s: bridgehead_peer_path of %s, path %s = %v, want 1", s, p.Gateway, path, v)
		}
		l.t.Logf("gw-%s -> %s: %s, rtt %v", s, p.Gateway, got, p.Live.ProbeRTT)
	}
	if len(want) > 0 {
		l.t.Errorf("gw-%s: no peers %v in status", s, want)
	}
}

// checkThroughHub: pods of the two edge sites reach each other through
// site A's gateway, which relays; a 50 MiB transfer arrives intact.
func (l *lab) checkThroughHub() {
	l.t.Helper()
	l.waitPing("e1", "e2", 20*time.Second)
	l.waitPing("e2", "e1", 5*time.Second)
	from := l.transfer("e1-node", natPods["e1"], "e2-node", natPods["e2"], 5001, 50<<20)
	if !strings.HasPrefix(from, natPods["e1"]+":") {
		l.t.Errorf("E2's pod saw the transfer from %s, want pod E1's address", from)
	}
	if ep := l.natEndpoints("e1")["gw-e2"]; !strings.HasPrefix(ep, "[100::") {
		l.t.Errorf("gw-e1 sends to gw-e2 at %s, want its relayed (pseudo) endpoint [100::id]:1", ep)
	}
	fwd := metric(l.metrics("a"), `bridgehead_transit_datagrams_total{direction="forwarded"}`)
	del := metric(l.metrics("e2"), `bridgehead_transit_datagrams_total{direction="delivered"}`)
	if fwd < 1000 || del < 1000 {
		l.t.Errorf("relayed datagrams: gw-a forwarded %v, gw-e2 delivered %v; want the transfer's", fwd, del)
	}
	l.t.Logf("gw-a forwarded %v relayed datagrams, gw-e2 received %v through it", fwd, del)
	l.checkHubBlind()
}

// TestNATLabSymmetric: with `masquerade random` on E2's NAT the mapping
// gets a random port (a symmetric NAT), which gw-a learns all the same;
// pods E1 and E2 stay on the hub path (checkThroughHub).
func TestNATLabSymmetric(t *testing.T) {
	l := startNATLab(t, "NAT_E2=random")
	l.checkNATTopology("e2", "203.0.113.12")
	l.waitPing("e2", "a", 20*time.Second)
	l.waitPing("a", "e2", 5*time.Second)
	ep, err := netip.ParseAddrPort(l.natEndpoints("a")["gw-e2"])
	if err != nil || ep.Addr() != netip.MustParseAddr("203.0.113.12") {
		t.Fatalf("gw-a sees gw-e2 at %v (%v), want 203.0.113.12:<port>", ep, err)
	}
	t.Logf("E2's symmetric NAT mapped 192.168.2.2:51820 to %s", ep)
	// Through the hub, a symmetric NAT is no obstacle; the direct path
	// cannot open (E2's NAT maps each destination to a new port), so
	// the pair stays on the hub, which stays blind.
	l.waitPing("e1", "e2", 20*time.Second)
	l.waitPing("e2", "e1", 5*time.Second)
	time.Sleep(2 * time.Second) // ten direct probe intervals
	l.checkPaths("e1", map[string]string{"gw-a": "direct", "gw-e2": "via hub site-a/gw-a"})
	l.checkThroughHub()
}

// checkNATTopology: nothing gets in to the gateway of edge site e, its
// own traffic gets out with the NAT's public address.
func (l *lab) checkNATTopology(e, public string) {
	l.t.Helper()
	// Inbound: datagrams to the NAT's public address on a port the
	// gateway listens on do not reach it, nor can its private
	// address be reached.
	sink := exec.Command("ip", "netns", "exec", l.ns(e+"-gw"), filepath.Join(l.bin, "bhprobe"), "udp-sink", "-listen", "0.0.0.0:40000", "-duration", "3s")
	sinkOut := &syncbuf.Buffer{}
	sink.Stdout, sink.Stderr = sinkOut, sinkOut
	if err := sink.Start(); err != nil {
		l.t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(sinkOut.String(), "listening") {
		if time.Now().After(deadline) {
			l.t.Fatalf("udp-sink did not start: %s", sinkOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// One datagram at a time: were the NAT to answer with ICMP port
	// unreachable, the sender's next write would fail.
	for range 10 {
		l.exec("a-gw", filepath.Join(l.bin, "bhprobe"), "udp-send", "-size", "64", public+":40000")
	}
	if err := sink.Wait(); err != nil {
		l.t.Fatalf("udp-sink: %v\n%s", err, sinkOut.String())
	}
	var flows map[string]json.RawMessage
	out := sinkOut.String()
	if err := json.Unmarshal([]byte(out[strings.Index(out, "\n")+1:]), &flows); err != nil {
		l.t.Fatalf("udp-sink output: %v\n%s", err, out)
	}
	if len(flows) != 0 {
		l.t.Errorf("%s-gw received datagrams sent to its NAT's public address %s: %s", e, public, out)
	}
	gwAddr := map[string]string{"e1": "192.168.1.2", "e2": "192.168.2.2"}[e]
	if out, err := l.exec("a-gw", filepath.Join(l.bin, "bhprobe"), "ping", "-count", "1", "-timeout", "500ms", gwAddr); err == nil {
		l.t.Errorf("a-gw reached %s-gw's private address %s: %s", e, gwAddr, out)
	}
	// Outbound: a TCP transfer from the gateway arrives from the NAT's
	// public address.
	from := l.transfer(e+"-gw", gwAddr, "a-gw", "203.0.113.1", 40001, 1<<16)
	if !strings.HasPrefix(from, public+":") {
		l.t.Errorf("%s-gw's connection arrived from %s, want %s:<port>", e, from, public)
	}
}

// waitPing pings from site from's pod to site to's pod until one echo is
// answered or timeout passes, then checks three more.
func (l *lab) waitPing(from, to string, timeout time.Duration) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, err := l.exec(from+"-node", filepath.Join(l.bin, "bhprobe"), "ping", "-src", natPods[from], "-count", "1", "-timeout", "500ms", natPods[to])
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("pod %s (%s) cannot reach pod %s (%s) within %v", from, natPods[from], to, natPods[to], timeout)
		}
	}
	out := l.probe(from+"-node", "ping", "-src", natPods[from], "-count", "3", "-timeout", "1s", natPods[to])
	l.t.Logf("%s -> %s: %s", from, to, strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
}

// natEndpoints returns where the gateway of site s sends to each remote
// gateway.
func (l *lab) natEndpoints(s string) map[string]string {
	l.t.Helper()
	out, err := l.exec(s+"-gw", filepath.Join(l.bin, "bridgehead"), "status", "--json", "--socket", filepath.Join(l.dir, s+".sock"))
	var st struct {
		Peers []struct {
			Gateway  string `json:"gateway"`
			Endpoint string `json:"endpoint"`
		} `json:"peers"`
	}
	if jerr := json.Unmarshal([]byte(out), &st); jerr != nil {
		l.t.Fatalf("status: %v, %v\n%s", err, jerr, out)
	}
	m := map[string]string{}
	for _, p := range st.Peers {
		m[p.Gateway] = p.Endpoint
	}
	if len(m) != 2 {
		l.t.Fatalf("gw-%s has %d peers: %s", s, len(m), fmt.Sprint(m))
	}
	return m
}
