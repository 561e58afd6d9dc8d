package daemon

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/netsetup"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// The daemon tests' lab: key files and configs of sites a, b and c in a
// test's directory, and gateways run in process on channel TUNs, memory
// binds and a fake kernel.

// fakeKernel records what the gateway asked of the kernel.
type fakeKernel struct {
	mu    sync.Mutex
	last  netsetup.Want
	calls int
	fail  error // returned by Apply, if set
}

func (k *fakeKernel) Apply(w netsetup.Want) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last, k.calls = w, k.calls+1
	return k.fail
}
func (k *fakeKernel) Close() error { return nil }

func (k *fakeKernel) tunnel() []netip.Prefix {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last.Tunnel
}

// labKeys is the private keys of sites a, b and c, written into a test's
// directory as <site>.key; write writes a gateway's config there.
type labKeys struct {
	priv map[string]bhcrypto.PrivateKey
}

func newLabKeys(t *testing.T, dir string) *labKeys {
	k := &labKeys{priv: map[string]bhcrypto.PrivateKey{}}
	for _, s := range []string{"a", "b", "c"} {
		p, err := bhcrypto.GeneratePrivateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k.priv[s] = p
		if err := os.WriteFile(filepath.Join(dir, s+".key"), []byte(p.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// siteYAML is one site of the catalog; endpoints are memory-bind addresses.
func (k *labKeys) siteYAML(s, node, pod, ep string) string {
	return fmt.Sprintf(`  - name: site-%[1]s
    nodeCIDRs: [%[2]s]
    podCIDRs: [%[3]s]
    gateways:
      - name: gw-%[1]s1
        address: %[5]s
        endpoint: %[4]s
        publicKey: %[6]s
`, s, node, pod, ep, strings.TrimSuffix(node, ".0/24")+".2", k.priv[s].PublicKey())
}

func (k *labKeys) write(t *testing.T, dir, local string, sites ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "site: site-%s\ngateway: gw-%s1\nprivateKeyFile: %s.key\nlisten: 127.0.0.1:51820\ninterface: {name: bh-%s, mtu: 1420}\nsites:\n", local, local, local, local)
	for _, s := range sites {
		b.WriteString(s)
	}
	path := filepath.Join(dir, local+".yaml")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	epA = netip.MustParseAddrPort("127.0.0.1:51001")
	epB = netip.MustParseAddrPort("127.0.0.1:51002")
)

// startGateway runs one gateway in process on a channel TUN and a memory
// bind, from its config file, the way Run would.
func startGateway(t *testing.T, path string, bind udp.Bind) (*gateway, *tun.Channel, *fakeKernel) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev := tun.NewChannel(cfg.Interface.Name, 1420)
	r, err := router.New(router.Options{TUN: dev, Bind: bind, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := routerConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetConfig(rc); err != nil {
		t.Fatal(err)
	}
	k := &fakeKernel{}
	g := &gateway{log: slog.New(slog.DiscardHandler), r: r, kern: k, m: newMetrics(r, "test"), id: id, mtu: 1420}
	g.cfg.Store(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return g, dev, k
}

// labAB is the lab most tests start from: keys for a, b and c in a new
// directory and gateway a's config listing sites a and b (pod CIDRs
// 10.101.0.0/16 and 10.102.0.0/16, memory-bind endpoints epA and epB).
type labAB struct {
	dir  string
	keys *labKeys
	a, b string // the sites' catalog entries (siteYAML)
	path string // gateway a's config file
}

func newLabAB(t *testing.T) *labAB {
	t.Helper()
	l := &labAB{dir: t.TempDir()}
	l.keys = newLabKeys(t, l.dir)
	l.a = l.keys.siteYAML("a", "10.1.0.0/24", "10.101.0.0/16", epA.String())
	l.b = l.keys.siteYAML("b", "10.2.0.0/24", "10.102.0.0/16", epB.String())
	l.path = l.keys.write(t, l.dir, "a", l.a, l.b)
	return l
}

// startA runs gateway a from l.path (startGateway) on a memory bind
// whose other end, b's, is closed: no peer answers.
func (l *labAB) startA(t *testing.T) (*gateway, *fakeKernel) {
	t.Helper()
	bindA, bindB := udp.NewPair(epA, epB)
	bindB.Close()
	g, _, k := startGateway(t, l.path, bindA)
	return g, k
}

// readyz returns the function that asks g's health handlers for /readyz
// and decodes the answer.
func readyz(t *testing.T, g *gateway) func() (int, health.Report) {
	mux := http.NewServeMux()
	g.healthHandlers(mux)
	return func() (int, health.Report) {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		var rep health.Report
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return rec.Code, rep
	}
}
