package catalog

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	c, err := New(Options{Sites: 5, Gateways: 2, Prefixes: 11, Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.PrefixCount(); got != 16 {
		t.Errorf("PrefixCount = %d, want 11 pods + 5 node CIDRs", got)
	}
	seen := map[netip.Prefix]bool{}
	eps := map[netip.AddrPort]bool{}
	for i, s := range c.Sites {
		if n := len(s.Pods); n != 2 && n != 3 {
			t.Errorf("site %d has %d pod prefixes, want 11 spread over 5", i, n)
		}
		for _, p := range append([]netip.Prefix{s.NodeCIDR}, s.Pods...) {
			if seen[p] {
				t.Errorf("prefix %s twice", p)
			}
			seen[p] = true
		}
		for _, g := range s.Gateways {
			if !s.NodeCIDR.Contains(g.Address) {
				t.Errorf("%s/%s address %s outside %s", s.Name, g.Name, g.Address, s.NodeCIDR)
			}
			if eps[g.Endpoint] {
				t.Errorf("endpoint %s twice", g.Endpoint)
			}
			eps[g.Endpoint] = true
			raw, _ := base64.StdEncoding.DecodeString(g.PrivateKey)
			k, err := ecdh.X25519().NewPrivateKey(raw)
			if err != nil || base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()) != g.PublicKey {
				t.Errorf("%s/%s: public key does not match the private key", s.Name, g.Name)
			}
		}
		for k, n := range s.Nodes {
			if n.PodCIDR != s.Pods[k] || !s.NodeCIDR.Contains(n.Address) {
				t.Errorf("node %s: %+v", n.Name, n)
			}
		}
	}
	again, _ := New(Options{Sites: 5, Gateways: 2, Prefixes: 11, Nodes: 2})
	a, _ := c.YAML(Local{})
	b, _ := again.YAML(Local{})
	if !bytes.Equal(a, b) {
		t.Error("the same options gave different files")
	}
}

func TestNewRefuses(t *testing.T) {
	for _, o := range []Options{
		{Sites: maxSites + 1},
		{Gateways: 251},
		{Prefixes: -1},
		{Sites: 10, Prefixes: 50, Nodes: 6},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestWrite(t *testing.T) {
	c, err := New(Options{Sites: 2, Gateways: 1, Prefixes: 4})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, err := c.Write(dir, "b.yaml", Local{Site: 1, ControlSocket: "/run/x.sock"})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	for _, want := range []string{"site: site-001\n", "gateway: gw-1\n", "controlSocket: /run/x.sock\n", "privateKeyFile: site-001-gw-1.key\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("config lacks %q", want)
		}
	}
	info, err := os.Stat(filepath.Join(dir, "site-001-gw-1.key"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, info)
	}
	if _, err := c.YAML(Local{Site: 2}); err == nil {
		t.Error("YAML of a site that does not exist")
	}
}
