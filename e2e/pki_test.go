package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pki is a test certificate authority and the certificates the callback
// tests need, written as PEM files in dir:
//
//	ca.pem                      the CA (trusted by clients, relay and kubelet)
//	kubelet.pem, kubelet.key    serving certificate of node B's kubelet
//	relay.pem, relay.key        serving certificate of gateway A's relay
//	client.pem, client.key      client certificate (kube-apiserver)
//	rogue.pem, rogue.key        client certificate signed by another CA
type pki struct{ dir string }

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	p := pki{dir: dir}
	ca, caKey := makeCA(t, "bridgehead test CA")
	writeCert(t, p.path("ca.pem"), ca, nil)
	issue(t, p, "kubelet", ca, caKey, []net.IP{net.ParseIP(nodeB), net.ParseIP(nodeB6)}, x509.ExtKeyUsageServerAuth)
	issue(t, p, "relay", ca, caKey, []net.IP{net.ParseIP(gwA)}, x509.ExtKeyUsageServerAuth)
	issue(t, p, "client", ca, caKey, nil, x509.ExtKeyUsageClientAuth)
	other, otherKey := makeCA(t, "some other CA")
	issue(t, p, "rogue", other, otherKey, nil, x509.ExtKeyUsageClientAuth)
	return p
}

var serial int64

func makeCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func issue(t *testing.T, p pki, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, ips []net.IP, usage x509.ExtKeyUsage) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writeCert(t, p.path(name+".pem"), c, key)
}

func writeCert(t *testing.T, path string, c *x509.Certificate, key *ecdsa.PrivateKey) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	if key == nil {
		return
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := path[:len(path)-len(".pem")] + ".key"
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
