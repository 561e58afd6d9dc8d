package daemon

import (
	"crypto/rand"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// TestMetricsLint checks every bridgehead_* series against Prometheus
// naming conventions (units, _total on counters, help text), with a peer
// configured so per-peer series exist.
func TestMetricsLint(t *testing.T) {
	key, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	peerKey, _ := bhcrypto.GeneratePrivateKey(rand.Reader)
	a, b := udp.NewPair(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2"))
	defer a.Close()
	defer b.Close()
	dev := tun.NewChannel("t", 1420)
	defer dev.Close()
	r, err := router.New(router.Options{TUN: dev, Bind: a, Identity: &bhcrypto.Identity{
		Private: key, Public: key.PublicKey(), Cipher: bhcrypto.AESGCM, Prologue: bhcrypto.Prologue("t")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetConfig(&router.Config{LocalSite: "a", Sites: []router.SiteConfig{
		{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
		{Name: "b", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")},
			Gateways: []router.PeerConfig{{Name: "gw", PublicKey: peerKey.PublicKey(), Endpoint: netip.MustParseAddrPort("127.0.0.1:2")}}},
	}}); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(r, "test")
	m.configInfo.WithLabelValues("x", "y").Set(1)
	m.siteReady.WithLabelValues("b").Set(1)
	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "bridgehead_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
			n++
		}
	}
	names, err := MetricNames(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("only %d bridgehead metrics gathered: %v", len(names), names)
	}
	// Every drop reason is exported before the first drop.
	got, err := testutil.GatherAndCount(m.reg, "bridgehead_dropped_packets_total")
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(router.Reasons()); got != want {
		t.Fatalf("%d drop series, want %d (every reason, both directions)", got, want)
	}
}

// fakeSock counts refusals as a udp.LinuxBind does.
type fakeSock map[udp.SendReason]uint64

func (f fakeSock) SendFailures(r udp.SendReason) uint64 { return f[r] }

// TestSendFailureMetrics: the kernel's refusals on every socket of the
// gateway are exported per reason, summed over the sockets, every
// reason from zero.
func TestSendFailureMetrics(t *testing.T) {
	a, b := udp.NewPair(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2"))
	defer a.Close()
	defer b.Close()
	dev := tun.NewChannel("t", 1420)
	defer dev.Close()
	key, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Options{TUN: dev, Bind: a, Identity: &bhcrypto.Identity{
		Private: key, Public: key.PublicKey(), Cipher: bhcrypto.AESGCM, Prologue: bhcrypto.Prologue("t")}})
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(r, "test", fakeSock{udp.SendProhibited: 2, udp.SendUnreachable: 1}, fakeSock{udp.SendProhibited: 1})
	want := `
# HELP bridgehead_udp_send_failures_total ` + sendFailuresHelp + `
# TYPE bridgehead_udp_send_failures_total counter
bridgehead_udp_send_failures_total{reason="invalid"} 0
bridgehead_udp_send_failures_total{reason="no_buffers"} 0
bridgehead_udp_send_failures_total{reason="other"} 0
bridgehead_udp_send_failures_total{reason="prohibited"} 3
bridgehead_udp_send_failures_total{reason="too_big"} 0
bridgehead_udp_send_failures_total{reason="unreachable"} 1
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "bridgehead_udp_send_failures_total"); err != nil {
		t.Fatal(err)
	}
}
