package relay

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// dialFrom connects to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRelayPerSourcePending: one client source cannot hold every slot of
// the request phase: past maxPendingPerSource its connections get 503
// (source_limit) while another source still gets through; the default
// bound is well below the default maxConnections.
func TestRelayPerSourcePending(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	cfg.MaxPendingPerSource = 3
	f := startRelay(t, cfg)
	for range 3 {
		dialFrom(t, "127.0.0.1", f.addr) // silent: stays in the request phase
	}
	waitFor(t, func() bool { f.r.mu.Lock(); defer f.r.mu.Unlock(); return f.r.pending == 3 })
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), nil); resp == nil || resp.StatusCode != 503 {
		t.Fatalf("a fourth from the same source: %v, want 503", resp)
	}
	if refused(f, ReasonSourceLimit) != 1 {
		t.Errorf("source_limit %v, want 1", refused(f, ReasonSourceLimit))
	}
	c := dialFrom(t, "127.0.0.2", f.addr)
	if _, err := c.Write([]byte(connectTo(up.String()))); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("another source: %q, %v; want 200", buf, err)
	}
	if d := (&Config{MaxConnections: 1024}).maxPendingPerSource(); d >= 1024 || d < 1 {
		t.Errorf("default per-source bound %d of 1024", d)
	}
}

// TestRelayAllowedClients: with allowedClients, a source outside it is
// closed at once without a word (client_not_allowed), before any TLS or
// request; one inside is served.
func TestRelayAllowedClients(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	cfg.AllowedClients = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	f := startRelay(t, cfg)
	c := dialFrom(t, "127.0.0.1", f.addr)
	c.Write([]byte(connectTo(up.String())))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); err == nil || n != 0 {
		t.Fatalf("a client outside allowedClients read %d bytes (%v)", n, err)
	}
	if refused(f, ReasonClientNotAllowed) != 1 {
		t.Errorf("client_not_allowed %v", refused(f, ReasonClientNotAllowed))
	}
	c = dialFrom(t, "127.0.0.2", f.addr)
	c.Write([]byte(connectTo(up.String())))
	buf := make([]byte, 12)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("an allowed client: %q, %v", buf, err)
	}
}

// pki writes a CA, a server certificate and key signed by it into dir,
// and returns the CA and its key.
type pki struct {
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

func newPKI(t *testing.T) pki {
	ca, key := testCA(t)
	return pki{ca, key}
}

func (p pki) cert(t *testing.T, cn string, usage x509.ExtKeyUsage) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func (p pki) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.ca.Raw})
}

// writeFile writes b to path with a modification time of its own, so
// that a rewrite within the file system's time granularity shows.
func writeFile(t *testing.T, path string, b []byte, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// tlsRelay serves a relay with LoadTLS over files in a temporary
// directory: a server certificate of srv, clients of clientCA.
func tlsRelay(t *testing.T, srv, clientCA pki, names []string, onErr func(error)) (*fixture, TLSFiles, netip.AddrPort) {
	t.Helper()
	up := echoServer(t, "127.0.1.5:0")
	dir := t.TempDir()
	files := TLSFiles{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		ClientCAFile: filepath.Join(dir, "ca.crt"), ClientNames: names}
	_, certPEM, keyPEM := srv.cert(t, "relay", x509.ExtKeyUsageServerAuth)
	mod := time.Now().Add(-time.Minute)
	writeFile(t, files.CertFile, certPEM, mod)
	writeFile(t, files.KeyFile, keyPEM, mod)
	writeFile(t, files.ClientCAFile, clientCA.caPEM(), mod)
	conf, err := LoadTLS(files, onErr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(up.Port())
	cfg.TLS = conf
	return startRelay(t, cfg), files, up
}

func tlsClient(srv pki, cert *tls.Certificate) func(net.Conn) net.Conn {
	return func(c net.Conn) net.Conn {
		pool := x509.NewCertPool()
		pool.AddCert(srv.ca)
		conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
		if cert != nil {
			conf.Certificates = []tls.Certificate{*cert}
		}
		return tls.Client(c, conf)
	}
}

// TestRelayClientIdentity: with client names pinned, a certificate the
// client CA signed is accepted only if it names one of them (common name,
// DNS name or URI): another component's certificate from the same CA is
// refused (client_identity).
func TestRelayClientIdentity(t *testing.T) {
	p := newPKI(t)
	f, _, up := tlsRelay(t, p, p, []string{"kube-apiserver"}, nil)
	apiserver, _, _ := p.cert(t, "kube-apiserver", x509.ExtKeyUsageClientAuth)
	other, _, _ := p.cert(t, "system:node:worker-1", x509.ExtKeyUsageClientAuth)
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), tlsClient(p, &other)); resp != nil {
		t.Fatalf("a certificate of the same CA with another name: %v, want the handshake refused", resp)
	}
	waitFor(t, func() bool { return refused(f, ReasonClientIdentity) == 1 })
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), tlsClient(p, &apiserver)); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("the pinned identity: %v", resp)
	}
}

// TestRelayTLSReload: a rotated client CA (and server certificate)
// applies to clients that connect after the files changed, without a
// restart; a change that does not load keeps the last good files and is
// reported.
func TestRelayTLSReload(t *testing.T) {
	srv, ca1, ca2 := newPKI(t), newPKI(t), newPKI(t)
	errs := make(chan error, 4)
	f, files, up := tlsRelay(t, srv, ca1, nil, func(err error) { errs <- err })
	c1, _, _ := ca1.cert(t, "a", x509.ExtKeyUsageClientAuth)
	c2, _, _ := ca2.cert(t, "b", x509.ExtKeyUsageClientAuth)
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), tlsClient(srv, &c2)); resp != nil {
		t.Fatalf("a client of the new CA before the rotation: %v", resp)
	}
	writeFile(t, files.ClientCAFile, ca2.caPEM(), time.Now())
	time.Sleep(tlsCheckInterval + 100*time.Millisecond)
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), tlsClient(srv, &c2)); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("a client of the rotated CA: %v", resp)
	}
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), tlsClient(srv, &c1)); resp != nil {
		t.Fatalf("a client of the old CA after the rotation: %v", resp)
	}
	// A broken key file: the last good files stay in use.
	writeFile(t, files.KeyFile, []byte("not a key"), time.Now().Add(time.Second))
	time.Sleep(tlsCheckInterval + 100*time.Millisecond)
	if resp, _, _ := connect(t, f.addr, connectTo(up.String()), tlsClient(srv, &c2)); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("after a broken rewrite: %v, want the last good files in use", resp)
	}
	select {
	case err := <-errs:
		t.Logf("reported: %v", err)
	default:
		t.Error("the broken rewrite was not reported")
	}
}

// TestRelayReloadRevokesClients: a reload that narrows allowedClients
// closes the relayed connections of clients now outside it (revoked),
// keeps those inside, and refuses a connection that passed the policy
// check before the reload but registers after it.
func TestRelayReloadRevokesClients(t *testing.T) {
	up := echoServer(t, "127.0.1.5:0")
	cfg := baseConfig(up.Port())
	f := startRelay(t, cfg)
	tunnel := func(src string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c := dialFrom(t, src, f.addr)
		if _, err := io.WriteString(c, connectTo(up.String())); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT from %s: %v, %v", src, resp, err)
		}
		c.SetReadDeadline(time.Time{})
		return c, br
	}
	gone, goneR := tunnel("127.0.0.1")
	kept, keptR := tunnel("127.0.0.2")
	next := cfg
	next.AllowedClients = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	if err := f.r.SetConfig(next); err != nil {
		t.Fatal(err)
	}
	gone.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := goneR.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection of a client no longer allowed survived the reload (%v)", err)
	}
	echoRound(t, kept, keptR, 64<<10)
	waitFor(t, func() bool { return testutil.ToFloat64(f.r.m.closed.WithLabelValues(CloseRevoked)) == 1 })

	// Past the policy check before the reload, registered after it.
	g := startRelay(t, cfg, func(r *Relay) {
		r.beforeRegister = sync.OnceFunc(func() {
			if err := r.SetConfig(next); err != nil {
				t.Error(err)
			}
		})
	})
	c := dialFrom(t, "127.0.0.1", g.addr)
	io.WriteString(c, connectTo(up.String()))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err == nil && resp.StatusCode == 200 {
		t.Fatal("a client removed from allowedClients before registration was relayed")
	}
	if st := g.r.Status(); st.Active != 0 {
		t.Errorf("%d connections registered after the client was removed", st.Active)
	}
}
