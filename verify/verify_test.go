package verify

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
	"github.com/bridgehead/bridgehead/health"
)

const labConfig = `site: site-a
gateway: gw-a1
privateKeyFile: a.key
interface: {name: bh0, mtu: 1420}
relay:
  listen: 10.224.0.4:8131
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: gw-a1, address: 10.224.0.4, endpoint: 203.0.113.1:51820, publicKey: %s}
    nodes:
      - {name: node-a1, address: 10.224.0.5, podCIDR: 10.244.1.0/24}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 192.168.50.2, endpoint: 203.0.113.2:51820, publicKey: %s}
    nodes:
      - {name: node-b1, address: 192.168.50.5, podCIDR: 10.245.1.0/24}
`

func labCfg(t *testing.T) *config.Config {
	t.Helper()
	keyA := "xDTpIwpj5jL4LbvoDKzmndQUVL91A3LwnhUmVLDeQWg="
	keyB := "cPzu0ZsO4kJ39V+RljlpPqlEv7KXh6Fgeq8J54XfzTM="
	c, err := config.Parse("/etc/bridgehead/a.yaml", []byte(fmt.Sprintf(labConfig, keyA, keyB)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeNet is a healthy lab unless a test changes it.
type fakeNet struct {
	pathMTU   map[netip.Addr]int // largest packet answered; absent: no reply
	tcp       map[netip.AddrPort]error
	routes    map[netip.Addr]Route
	sysctl    map[string]string
	mtu       int
	relayCode int
	linkErr   error // LinkMTU fails with it (no TUN device)
	pings     []string
}

func healthyNet() *fakeNet {
	a := netip.MustParseAddr
	return &fakeNet{
		pathMTU: map[netip.Addr]int{a("192.168.50.2"): 1420, a("192.168.50.5"): 1420},
		tcp:     map[netip.AddrPort]error{netip.MustParseAddrPort("192.168.50.5:10250"): nil},
		routes: map[netip.Addr]Route{
			a("192.168.50.0"): {Dev: "bh0"}, a("10.245.0.0"): {Dev: "bh0"},
			a("10.224.0.0"): {Dev: "lan"}, a("10.244.0.0"): {Dev: "lan"},
			a("10.244.1.0"): {Dev: "lan", Via: a("10.224.0.5")},
		},
		sysctl:    map[string]string{"net/ipv4/ip_forward": "1"},
		mtu:       1420,
		relayCode: 200,
	}
}

func (f *fakeNet) Ping(_ context.Context, src, dst netip.Addr, size int, _ time.Duration) (time.Duration, error) {
	f.pings = append(f.pings, fmt.Sprintf("%s>%s:%d", src, dst, size))
	if size > f.mtu {
		return 0, syscall.EMSGSIZE
	}
	if m, ok := f.pathMTU[dst]; ok && size <= m {
		return 400 * time.Microsecond, nil
	}
	return 0, errTimeout{}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

func (f *fakeNet) Dial(_ context.Context, src netip.Addr, dst netip.AddrPort, _ time.Duration) (net.Conn, error) {
	if dst == netip.MustParseAddrPort("10.224.0.4:8131") {
		if f.relayCode == 0 {
			return nil, syscall.ECONNREFUSED
		}
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			br := bufio.NewReader(server)
			req, err := http.ReadRequest(br)
			if f.relayCode < 0 { // still dialing: no answer
				io.Copy(io.Discard, br)
				return
			}
			if err != nil || req.Method != http.MethodConnect || req.RequestURI != "192.168.50.5:10250" {
				fmt.Fprint(server, "HTTP/1.1 400 Bad Request\r\n\r\n")
				return
			}
			fmt.Fprintf(server, "HTTP/1.1 %d %s\r\n\r\n", f.relayCode, http.StatusText(f.relayCode))
		}()
		return client, nil
	}
	if src != netip.MustParseAddr("10.224.0.4") {
		return nil, fmt.Errorf("probe from %s, not the gateway's LAN address", src)
	}
	err, ok := f.tcp[dst]
	if !ok {
		return nil, errTimeout{}
	}
	if err != nil {
		return nil, err
	}
	c, s := net.Pipe()
	s.Close()
	return c, nil
}

func (f *fakeNet) Route(dst netip.Addr) (Route, error) {
	r, ok := f.routes[dst]
	if !ok {
		return Route{}, errors.New("network unreachable")
	}
	return r, nil
}

func (f *fakeNet) Sysctl(name string) (string, error) {
	v, ok := f.sysctl[name]
	if !ok {
		return "", errors.New("no such file")
	}
	return v, nil
}

func (f *fakeNet) Lookup(context.Context, netip.AddrPort, string, time.Duration) ([]netip.Addr, error) {
	return nil, errors.New("no DNS in the gateway checks")
}

func (f *fakeNet) LinkMTU(string) (int, error) {
	if f.linkErr != nil {
		return 0, f.linkErr
	}
	return f.mtu, nil
}

func runWith(t *testing.T, cfg *config.Config, n *fakeNet, st *control.Status) *Report {
	t.Helper()
	return Run(context.Background(), Options{
		Config: cfg, Net: n, Timeout: 250 * time.Millisecond, // the fakes answer at once; the relay pipe needs a goroutine to run on a loaded machine
		Status: func(context.Context) (*control.Status, error) {
			if st == nil {
				return nil, errors.New("no control socket at /run/bridgehead/bridgehead.sock")
			}
			return st, nil
		},
	})
}

func healthyStatus(cfg *config.Config) *control.Status {
	return &control.Status{Site: "site-a", Gateway: "gw-a1", ConfigHash: cfg.Hash(), Started: time.Now().Add(-time.Minute),
		Peers: []health.PeerState{{Site: "site-b", Gateway: "gw-b1", LastHandshake: time.Now().Add(-5 * time.Second)}}}
}

// find returns the checks called name.
func find(r *Report, name string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

func TestHealthy(t *testing.T) {
	cfg := labCfg(t)
	rep := runWith(t, cfg, healthyNet(), healthyStatus(cfg))
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !rep.OK() || rep.Skip != 0 {
		t.Fatalf("healthy lab: %d failed, %d skipped:\n%s", rep.Failed, rep.Skip, buf.String())
	}
	for _, name := range []string{"gateway", "remote-gateway", "node", "path-mtu", "kernel-routes", "forwarding", "relay"} {
		if len(find(rep, name)) != 1 {
			t.Errorf("want one %s check:\n%s", name, buf.String())
		}
	}
	for _, want := range []string{"rtt 0.40 ms", "tcp :10250", "1420 bytes = bh0 mtu 1420", "5 of 5 as configured", "net.ipv4.ip_forward=1", "CONNECT 200"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestFailures(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		change func(n *fakeNet, st *control.Status)
		check  string
		result Result
		detail string
	}{
		{"daemon down", func(n *fakeNet, st *control.Status) {}, "gateway", Fail, "is bridgehead running?"},
		{"stale config", func(n *fakeNet, st *control.Status) { st.ConfigHash = "000000000000" }, "gateway", Fail, "last reload was refused"},
		{"peer down", func(n *fakeNet, st *control.Status) { delete(n.pathMTU, a("192.168.50.2")) }, "remote-gateway", Fail, "is bridgehead on gw-b1 running?"},
		{"never a session", func(n *fakeNet, st *control.Status) {
			delete(n.pathMTU, a("192.168.50.2"))
			st.Peers[0].LastHandshake = time.Time{}
		}, "remote-gateway", Fail, "no session was ever set up"},
		{"node unreachable", func(n *fakeNet, st *control.Status) {
			delete(n.pathMTU, a("192.168.50.5"))
			delete(n.tcp, netip.MustParseAddrPort("192.168.50.5:10250"))
		}, "node", Fail, "nothing gets through"},
		{"kubelet not listening", func(n *fakeNet, st *control.Status) {
			n.tcp[netip.MustParseAddrPort("192.168.50.5:10250")] = syscall.ECONNREFUSED
		}, "node", Fail, "is the kubelet listening on 192.168.50.5:10250?"},
		{"kubelet port filtered", func(n *fakeNet, st *control.Status) {
			delete(n.tcp, netip.MustParseAddrPort("192.168.50.5:10250"))
		}, "node", Fail, "drops it"},
		{"mtu black hole", func(n *fakeNet, st *control.Status) { n.pathMTU[a("192.168.50.2")] = 1340 }, "path-mtu", Fail, "set interface.mtu to 1340"},
		{"route stolen", func(n *fakeNet, st *control.Status) {
			n.routes[a("10.245.0.0")] = Route{Dev: "eth1", Via: a("10.1.1.1")}
		}, "kernel-routes", Fail, "10.245.0.0/16 of site-b goes via 10.1.1.1 dev eth1, not into bh0"},
		{"local site hijacked", func(n *fakeNet, st *control.Status) { n.routes[a("10.224.0.0")] = Route{Dev: "bh0"} }, "kernel-routes", Fail, "hijack"},
		{"pod route missing", func(n *fakeNet, st *control.Status) { delete(n.routes, a("10.244.1.0")) }, "kernel-routes", Fail, "pod range 10.244.1.0/24 of node-a1"},
		{"forwarding off", func(n *fakeNet, st *control.Status) { n.sysctl["net/ipv4/ip_forward"] = "0" }, "forwarding", Fail, "sysctl -w net.ipv4.ip_forward=1"},
		{"relay down", func(n *fakeNet, st *control.Status) { n.relayCode = 0 }, "relay", Fail, "is the relay listening on 10.224.0.4:8131"},
		{"relay silent", func(n *fakeNet, st *control.Status) { n.relayCode = -1 }, "relay", Fail, "still dialing"},
		{"relay refuses", func(n *fakeNet, st *control.Status) { n.relayCode = 403 }, "relay", Fail, "the relay answered 403"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := labCfg(t)
			n, st := healthyNet(), healthyStatus(cfg)
			tc.change(n, st)
			if tc.name == "daemon down" {
				st = nil
			}
			rep := runWith(t, cfg, n, st)
			var buf bytes.Buffer
			rep.WriteTable(&buf)
			if rep.OK() {
				t.Fatalf("report passed:\n%s", buf.String())
			}
			got := find(rep, tc.check)
			ok := false
			for _, c := range got {
				if c.Result == tc.result && strings.Contains(c.Detail, tc.detail) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("want %s %s with %q:\n%s", tc.check, tc.result, tc.detail, buf.String())
			}
		})
	}
}

func TestMTUFigure(t *testing.T) {
	cfg := labCfg(t)
	n := healthyNet()
	n.pathMTU[netip.MustParseAddr("192.168.50.2")] = 1377
	rep := runWith(t, cfg, n, healthyStatus(cfg))
	c := find(rep, "path-mtu")[0]
	if c.Figure != "1377 bytes < bh0 mtu 1420" || !strings.Contains(c.Detail, "about 1437-byte datagrams") {
		t.Errorf("path-mtu %+v", c)
	}
	// Every probe leaves from the gateway's LAN address.
	for _, p := range n.pings {
		if !strings.HasPrefix(p, "10.224.0.4>") {
			t.Errorf("probe %s not from the gateway's LAN address", p)
		}
	}
}

func TestTargets(t *testing.T) {
	cfg := labCfg(t)
	n := healthyNet()
	rep := Run(context.Background(), Options{Config: cfg, Net: n, Timeout: 250 * time.Millisecond, // the fakes answer at once; the relay pipe needs a goroutine to run on a loaded machine
		Targets: []netip.Addr{netip.MustParseAddr("192.168.50.5"), netip.MustParseAddr("172.31.0.1"), netip.MustParseAddr("10.224.0.9")}})
	nodes := find(rep, "node")
	if len(nodes) != 3 || nodes[0].Result != Pass || nodes[1].Result != Fail || nodes[2].Result != Skip {
		t.Errorf("targets: %+v", nodes)
	}
	if g := find(rep, "gateway"); g[0].Result != Skip {
		t.Errorf("no Status func: gateway %+v", g[0])
	}
}

func TestJSON(t *testing.T) {
	cfg := labCfg(t)
	rep := runWith(t, cfg, healthyNet(), healthyStatus(cfg))
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"check": "path-mtu"`) || !strings.Contains(buf.String(), `"passed": 7`) {
		t.Errorf("json:\n%s", buf.String())
	}
}

// TestDependentChecksSkip: once a prerequisite fails, the checks that
// need it SKIP and name it instead of failing for the same cause (#19
// item 14: with no gateway running, verify printed 5 FAILs, one of them
// blaming "something" for resetting the forwarding sysctl).
func TestDependentChecksSkip(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		change func(n *fakeNet, st **control.Status)
		// fail is the one check that fails; skip maps each check that
		// must SKIP to the prerequisite its detail names; the rest pass.
		fail string
		skip map[string]string
	}{
		{"no gateway running", func(n *fakeNet, st **control.Status) {
			// What a host without a running bridgehead looks like.
			*st = nil
			delete(n.pathMTU, a("192.168.50.2"))
			delete(n.pathMTU, a("192.168.50.5"))
			delete(n.tcp, netip.MustParseAddrPort("192.168.50.5:10250"))
			delete(n.routes, a("192.168.50.0"))
			delete(n.routes, a("10.245.0.0"))
			n.sysctl["net/ipv4/ip_forward"] = "0"
			n.linkErr = errors.New("route ip+net: no such network interface")
			n.relayCode = 0
		}, "gateway", map[string]string{
			"remote-gateway": "needs gateway gw-a1 (site-a)", "node": "needs gateway gw-a1 (site-a)",
			"path-mtu": "needs gateway gw-a1 (site-a)", "kernel-routes": "needs gateway gw-a1 (site-a)",
			"forwarding": "needs gateway gw-a1 (site-a)", "relay": "needs gateway gw-a1 (site-a)",
		}},
		{"remote gateway down", func(n *fakeNet, st **control.Status) {
			delete(n.pathMTU, a("192.168.50.2"))
			delete(n.pathMTU, a("192.168.50.5"))
			delete(n.tcp, netip.MustParseAddrPort("192.168.50.5:10250"))
			n.relayCode = -1
		}, "remote-gateway", map[string]string{
			"node":     "needs remote-gateway site-b/gw-b1 192.168.50.2",
			"path-mtu": "needs remote-gateway site-b/gw-b1 192.168.50.2",
			"relay":    "needs remote-gateway site-b/gw-b1 192.168.50.2",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := labCfg(t)
			n, st := healthyNet(), healthyStatus(cfg)
			tc.change(n, &st)
			rep := runWith(t, cfg, n, st)
			var buf bytes.Buffer
			rep.WriteTable(&buf)
			if rep.Failed != 1 {
				t.Errorf("%d FAILs, want 1 (%s):\n%s", rep.Failed, tc.fail, buf.String())
			}
			for _, c := range rep.Checks {
				want, skip := tc.skip[c.Name]
				switch {
				case c.Name == tc.fail:
					if c.Result != Fail {
						t.Errorf("%s %s: %s, want FAIL", c.Name, c.Target, c.Result)
					}
				case skip:
					if c.Result != Skip || !strings.Contains(c.Detail, want+", which failed above") {
						t.Errorf("%s %s: %s %q, want SKIP naming %q", c.Name, c.Target, c.Result, c.Detail, want)
					}
				case c.Result != Pass:
					t.Errorf("%s %s: %s, want PASS", c.Name, c.Target, c.Result)
				}
			}
			if strings.Contains(buf.String(), "something reset") {
				t.Errorf("blames something for resetting the sysctl:\n%s", buf.String())
			}
		})
	}
}
