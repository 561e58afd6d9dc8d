package relay

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/clocktest"
	"github.com/bridgehead/bridgehead/internal/tcptest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Loopback address plan of the tests: site a is local, b and c remote.
var (
	siteA = Site{Name: "a", NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.3.0/24")}}
	siteB = Site{Name: "b", NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.1.0/24")},
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.2.0/24")}}
	siteC = Site{Name: "c", NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.4.0/24")}}
)

// echoServer accepts on addr and echoes every connection until EOF, then
// half-closes. It stops when the test ends.
func echoServer(t testing.TB, addr string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tcptest.Serve(t, ln, func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	})
	return netip.MustParseAddrPort(ln.Addr().String())
}

type fixture struct {
	r    *Relay
	addr string
	reg  *prometheus.Registry
	logs *syncBuf
	cfg  Config
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func baseConfig(ports ...uint16) Config {
	return Config{
		LocalSite: "a", Sites: []Site{siteA, siteB, siteC}, AllowedPorts: ports,
		MaxConnections: 100, MaxConnectionsPerDestination: 10,
		IdleTimeout: time.Minute, HeaderTimeout: 2 * time.Second,
	}
}

// startRelay serves a relay on loopback; each set runs on it before Serve.
func startRelay(t testing.TB, cfg Config, set ...func(*Relay)) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry(), logs: &syncBuf{}, cfg: cfg}
	r, err := New(Options{Config: cfg, Registry: f.reg, Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.addr = r, ln.Addr().String()
	for _, fn := range set {
		fn(r)
	}
	done := make(chan error, 1)
	go func() { done <- r.Serve(ln) }()
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return f
}

// connect sends raw as the request and returns the response and the
// connection (positioned after the response head).
func connect(t testing.TB, addr, raw string, wrap func(net.Conn) net.Conn) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var conn net.Conn = c
	if wrap != nil {
		conn = wrap(c)
	}
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, conn, br
	}
	conn.SetReadDeadline(time.Time{})
	return resp, conn, br
}

func connectTo(dst string) string {
	return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
}

func refused(f *fixture, r Reason) float64 {
	return testutil.ToFloat64(f.r.m.refused.WithLabelValues(string(r)))
}

// echoRound writes n bytes, half-closes, and checks the echo and EOF.
func echoRound(t testing.TB, c net.Conn, br *bufio.Reader, n int) {
	t.Helper()
	data := make([]byte, n)
	rand.Read(data)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = closeWrite(c)
		}
		errc <- err
	}()
	got, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo: got %d bytes, want %d (equal prefix: %v)", len(got), n, bytes.HasPrefix(data, got))
	}
}

func TestRelayEcho(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	f := startRelay(t, baseConfig(up.Port()))
	// Bytes sent right behind the request must not be lost.
	resp, c, br := connect(t, f.addr, connectTo(up.String())+"early", nil)
	if resp == nil || resp.StatusCode != 200 || resp.Status != "200 Connection established" {
		t.Fatalf("response %v", resp)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "early" {
		t.Fatalf("early bytes: %q %v", buf, err)
	}
	echoRound(t, c, br, 1<<20)
	waitFor(t, func() bool { return strings.Contains(f.logs.String(), "close=done") })
	log := f.logs.String()
	for _, want := range []string{"msg=\"relay connection\"", "destination=" + up.String(), "site=b", "status=200",
		"bytes_to_destination=1048581", "bytes_to_client=1048581", "close=done"} {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %s:\n%s", want, log)
		}
	}
	if got := testutil.ToFloat64(f.r.m.toDest); got != 1<<20+5 {
		t.Errorf("bytes to destination = %v", got)
	}
	if got := testutil.ToFloat64(f.r.m.total); got != 1 {
		t.Errorf("connections total = %v", got)
	}
	if got := testutil.ToFloat64(f.r.m.active); got != 0 {
		t.Errorf("connections active = %v", got)
	}
}

func TestRelayRefusals(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	pod := echoServer(t, "127.0.2.5:0")
	local := echoServer(t, "127.0.3.5:0")
	f := startRelay(t, baseConfig(up.Port(), pod.Port(), local.Port()))
	port := fmt.Sprint(up.Port())
	for _, tc := range []struct {
		name   string
		raw    string
		status int
		reason Reason
	}{
		{"get", "GET http://127.0.1.5:" + port + "/ HTTP/1.1\r\nHost: x\r\n\r\n", 405, ReasonMethod},
		{"hostname", connectTo("kubelet.example:10250"), 403, ReasonHostname},
		{"local site", connectTo(local.String()), 403, ReasonLocalSite},
		{"outside every site", connectTo("127.0.9.9:" + port), 403, ReasonNotInSite},
		{"pod cidr", connectTo(pod.String()), 403, ReasonPodCIDR},
		{"port", connectTo("127.0.1.5:22"), 403, ReasonPort},
		{"no port", connectTo("127.0.1.5"), 400, ReasonBadRequest},
		{"garbage", "\x16\x03\x01 hello\r\n\r\n", 400, ReasonBadRequest},
		{"huge header", "CONNECT 127.0.1.5:" + port + " HTTP/1.1\r\nX: " + strings.Repeat("a", 20000) + "\r\n\r\n", 400, ReasonBadRequest},
		{"dial refused", connectTo("127.0.1.6:" + port), 502, ReasonDialFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refused(f, tc.reason)
			resp, _, _ := connect(t, f.addr, tc.raw, nil)
			if resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("response %v, want %d", resp, tc.status)
			}
			if got := refused(f, tc.reason); got != before+1 {
				t.Errorf("refused{%s} = %v, want %v", tc.reason, got, before+1)
			}
		})
	}
	waitFor(t, func() bool { return f.r.Status().Active == 0 })
	st := f.r.Status()
	if len(st.Refused) != 8 {
		t.Errorf("status %+v", st)
	}
	if !strings.Contains(f.logs.String(), `msg="relay connection refused"`) || !strings.Contains(f.logs.String(), "status=403") {
		t.Errorf("no refusal lines in the access log:\n%s", f.logs.String())
	}
}

func TestRelayPodCIDRsAllowed(t *testing.T) {
	pod := echoServer(t, "127.0.2.5:0")
	cfg := baseConfig(pod.Port())
	cfg.AllowPodCIDRs = true
	f := startRelay(t, cfg)
	resp, c, br := connect(t, f.addr, connectTo(pod.String()), nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("response %v", resp)
	}
	echoRound(t, c, br, 1000)
}

func TestRelayHeaderTimeout(t *testing.T) {
	cfg := baseConfig(10250)
	cfg.HeaderTimeout = 200 * time.Millisecond
	f := startRelay(t, cfg)
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT 127.0.1.5:10250 HTTP/1.1\r\n") // and nothing more
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 100)); err == nil || n != 0 {
		t.Fatalf("slow client not cut off: read %d, %v", n, err)
	}
	waitFor(t, func() bool { return refused(f, ReasonHeaderTimeout) == 1 })
}

func TestRelayLimits(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	up2 := echoServer(t, "127.0.1.7:0")
	cfg := baseConfig(up.Port(), up2.Port())
	cfg.MaxConnections, cfg.MaxConnectionsPerDestination = 3, 2
	f := startRelay(t, cfg)
	for range 2 {
		if resp, _, _ := connect(t, f.addr, connectTo(up.String()), nil); resp == nil || resp.StatusCode != 200 {
			t.Fatalf("response %v", resp)
		}
	}
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), nil); resp == nil || resp.StatusCode != 503 {
		t.Fatalf("third to one destination: %v, want 503", resp)
	}
	if resp, _, _ := connect(t, f.addr, connectTo(up2.String()), nil); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("other destination: %v", resp)
	}
	if resp, _, _ := connect(t, f.addr, connectTo(up2.String()), nil); resp == nil || resp.StatusCode != 503 {
		t.Fatalf("over maxConnections: %v, want 503", resp)
	}
	if refused(f, ReasonDestinationLimit) != 1 || refused(f, ReasonLimit) != 1 {
		t.Errorf("refusals: destination_limit %v, limit %v", refused(f, ReasonDestinationLimit), refused(f, ReasonLimit))
	}
	if st := f.r.Status(); st.Active != 3 || len(st.BySite) != 1 || st.BySite[0] != (SiteActive{"b", 3}) {
		t.Errorf("status %+v", st)
	}
}

func TestRelayIdleTimeout(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	cfg.IdleTimeout = 300 * time.Millisecond
	f := startRelay(t, cfg)
	resp, c, br := connect(t, f.addr, connectTo(up.String()), nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("response %v", resp)
	}
	// Traffic keeps it open past the idle timeout...
	for range 6 {
		io.WriteString(c, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// ... silence closes it.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("idle connection still open")
	}
	waitFor(t, func() bool { return testutil.ToFloat64(f.r.m.closed.WithLabelValues(CloseIdle)) == 1 })
}

// TestRelayReloadRevokes: a reload that removes site b closes the
// connection to b and keeps the one to c.
func TestRelayReloadRevokes(t *testing.T) {
	upB := echoServer(t, "127.0.1.5:0")
	upC := echoServer(t, "127.0.4.5:0")
	cfg := baseConfig(upB.Port(), upC.Port())
	f := startRelay(t, cfg)
	_, cb, brb := connect(t, f.addr, connectTo(upB.String()), nil)
	_, cc, brc := connect(t, f.addr, connectTo(upC.String()), nil)
	next := cfg
	next.Sites = []Site{siteA, siteC}
	if err := f.r.SetConfig(next); err != nil {
		t.Fatal(err)
	}
	cb.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := brb.ReadByte(); err == nil {
		t.Fatal("connection to the removed site survived")
	}
	echoRound(t, cc, brc, 64<<10)
	waitFor(t, func() bool { return strings.Contains(f.logs.String(), "close=revoked") })
	if got := testutil.ToFloat64(f.r.m.closed.WithLabelValues(CloseRevoked)); got != 1 {
		t.Errorf("closed{revoked} = %v", got)
	}
	// New connections follow the new plan.
	if resp, _, _ := connect(t, f.addr, connectTo(upB.String()), nil); resp == nil || resp.StatusCode != 403 {
		t.Errorf("after reload, CONNECT to removed site: %v, want 403", resp)
	}
}

func TestRelayMTLS(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	ca, caKey := testCA(t)
	other, otherKey := testCA(t)
	serverCert := testCert(t, ca, caKey, x509.ExtKeyUsageServerAuth)
	good := testCert(t, ca, caKey, x509.ExtKeyUsageClientAuth)
	rogue := testCert(t, other, otherKey, x509.ExtKeyUsageClientAuth)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cfg := baseConfig(up.Port())
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	f := startRelay(t, cfg)
	client := func(cert *tls.Certificate) func(net.Conn) net.Conn {
		return func(c net.Conn) net.Conn {
			conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
			if cert != nil {
				conf.Certificates = []tls.Certificate{*cert}
			}
			return tls.Client(c, conf)
		}
	}
	resp, c, br := connect(t, f.addr, connectTo(up.String()), client(&good))
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("valid client certificate: %v", resp)
	}
	echoRound(t, c, br, 256<<10)
	for name, cert := range map[string]*tls.Certificate{"other CA": &rogue, "no certificate": nil} {
		before := refused(f, ReasonTLS)
		if resp, _, _ := connect(t, f.addr, connectTo(up.String()), client(cert)); resp != nil {
			t.Errorf("%s: got %v, want the handshake refused", name, resp)
		}
		waitFor(t, func() bool { return refused(f, ReasonTLS) == before+1 })
	}
	if !f.r.Status().TLS {
		t.Error("status does not say TLS")
	}
}

func TestRelayCloseShutsConnections(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	f := startRelay(t, baseConfig(up.Port()))
	_, c, br := connect(t, f.addr, connectTo(up.String()), nil)
	if err := f.r.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("connection open after Close")
	}
	if got := testutil.ToFloat64(f.r.m.closed.WithLabelValues(CloseShutdown)); got != 1 {
		t.Errorf("closed{shutdown} = %v", got)
	}
}

func TestDecide(t *testing.T) {
	cfg := baseConfig(10250)
	for _, tc := range []struct {
		dst  string
		want Reason
	}{
		{"127.0.1.1:10250", ReasonNone},
		{"127.0.4.200:10250", ReasonNone},
		{"127.0.1.1:10255", ReasonPort},
		{"127.0.2.1:10250", ReasonPodCIDR},
		{"127.0.3.1:10250", ReasonLocalSite},
		{"10.0.0.1:10250", ReasonNotInSite},
		{"[::ffff:127.0.1.1]:10250", ReasonNone}, // IPv4-mapped: decided as IPv4
	} {
		if got := cfg.decide(netip.MustParseAddrPort(tc.dst)); got.reason != tc.want {
			t.Errorf("decide(%s) = %q (%s), want %q", tc.dst, got.reason, got.why, tc.want)
		}
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func testCert(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestSharedRegistry: a relay started on the registry of a stopped one
// (a reload that moves it) takes over its series.
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Options{Config: baseConfig(10250), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	a.refuse(ReasonPort)
	a.Close()
	b, err := New(Options{Config: baseConfig(10250), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.refuse(ReasonPort)
	if got := testutil.ToFloat64(b.m.refused.WithLabelValues(string(ReasonPort))); got != 2 {
		t.Errorf("refused{port} = %v after the second relay, want 2", got)
	}
}

// TestRelayRevokedBeforeRegister: a reload that removes the destination's
// site between a connection's policy check and its registration (after
// the check, before SetConfig's scan could see it) still refuses it.
func TestRelayRevokedBeforeRegister(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	next := cfg
	next.Sites = []Site{siteA, siteC}
	f := startRelay(t, cfg, func(r *Relay) {
		r.beforeRegister = sync.OnceFunc(func() {
			if err := r.SetConfig(next); err != nil {
				t.Error(err)
			}
		})
	})
	resp, _, _ := connect(t, f.addr, connectTo(up.String()), nil)
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT to a site removed before registration: %v, want 403", resp)
	}
	if st := f.r.Status(); st.Active != 0 {
		t.Errorf("%d connections registered after the revocation", st.Active)
	}
	if got := refused(f, ReasonNotInSite); got != 1 {
		t.Errorf("refused{not_in_site} = %v, want 1", got)
	}
}

// halfCloseServer accepts on addr, half-closes every connection at once
// and never reads from it: a destination that sent FIN and stopped.
func halfCloseServer(t testing.TB, addr string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).CloseWrite()
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return netip.MustParseAddrPort(ln.Addr().String())
}

// TestRelayHalfCloseHang: the destination half-closes and never reads
// while the client keeps writing. The relay's write toward it must not
// block forever: the idle timeout ends the connection.
func TestRelayHalfCloseHang(t *testing.T) {
	up := halfCloseServer(t, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	cfg.IdleTimeout = 300 * time.Millisecond
	f := startRelay(t, cfg)
	resp, c, _ := connect(t, f.addr, connectTo(up.String()), nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("response %v", resp)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 8<<20))
		werr <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for f.r.Status().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d relayed connections still open 5s after the destination stopped reading", f.r.Status().Active)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Close()
	<-werr
	if got := testutil.ToFloat64(f.r.m.closed.WithLabelValues(CloseIdle)); got != 1 {
		t.Errorf("closed{idle} = %v, want 1", got)
	}
}

// steppedClock is time.Now with its wall clock moved by a step the test
// sets; the monotonic reading stays true.
type steppedClock struct {
	tb   testing.TB
	mu   sync.Mutex
	step time.Duration
}

func (c *steppedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clocktest.WallStep(c.tb, time.Now(), c.step)
}

func (c *steppedClock) set(step time.Duration) {
	c.mu.Lock()
	c.step = step
	c.mu.Unlock()
}

// TestRelayWallClockStep: a step of the wall clock (chrony at first boot)
// does not close a busy connection as idle: the idle check measures
// monotonic time.
func TestRelayWallClockStep(t *testing.T) {
	sink := sinkServer(t, "127.0.1.5:0")
	cfg := baseConfig(sink.Port())
	cfg.IdleTimeout = 300 * time.Millisecond
	clock := &steppedClock{tb: t}
	f := startRelay(t, cfg, func(r *Relay) { r.now = clock.now })
	resp, c, br := connect(t, f.addr, connectTo(sink.String()), nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("response %v", resp)
	}
	// The client writes every 50 ms for 1.5 s (the destination only
	// reads, so the way back stays quiet) while the wall clock jumps an
	// hour ahead every 10 ms: each idle check of the quiet way comes
	// after a step that followed the last byte.
	stop := make(chan struct{})
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		for i := 1; ; i++ {
			clock.set(time.Duration(i) * time.Hour)
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-stepped }()
	for range 30 {
		if _, err := io.WriteString(c, "busy"); err != nil {
			t.Fatalf("write: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := testutil.ToFloat64(f.r.m.closed.WithLabelValues(CloseIdle)); got != 0 {
		t.Fatalf("closed{idle} = %v: a busy connection was closed after a wall-clock step", got)
	}
	// Quiet both ways, it still ends as idle.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("idle connection still open")
	}
	waitFor(t, func() bool { return testutil.ToFloat64(f.r.m.closed.WithLabelValues(CloseIdle)) == 1 })
}

// sinkServer accepts on addr and reads every connection until EOF,
// sending nothing.
func sinkServer(t testing.TB, addr string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tcptest.Serve(t, ln, func(c net.Conn) {
		defer c.Close()
		io.Copy(io.Discard, c)
	})
	return netip.MustParseAddrPort(ln.Addr().String())
}
