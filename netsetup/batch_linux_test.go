package netsetup

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
)

// TestApplyManyTunnelRoutes: more tunnel routes than one batch holds, of
// both families, are all installed, each answered on its own: an unknown
// link fails every request with the kernel's own error, and a real one
// installs them all, as Apply then sees in the route dump.
func TestApplyManyTunnelRoutes(t *testing.T) {
	enterNetns(t)
	e := newEnv(t)
	s := newSetup(t)
	var ps []netip.Prefix
	for i := range 700 {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24))
	}
	for i := range 300 {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 1, 0, 0, byte(i >> 8), byte(i)}), 64))
	}

	errs := s.rs.replaceTunnel(1<<30, ps) // no such link
	for i, err := range errs {
		if !errors.Is(err, syscall.ENODEV) {
			t.Fatalf("route %d (%s) to a missing link: %v, want ENODEV", i, ps[i], err)
		}
	}

	if err := s.Apply(Want{Link: tunName, Tunnel: ps}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	have, _, err := s.kernelRoutes()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if !have[kernelRoute{p, e.tun.Attrs().Index, netip.Addr{}}] {
			t.Fatalf("route %s dev %s missing after Apply", p, tunName)
		}
	}
	if tunnel, _ := s.Routes(); len(tunnel) != len(ps) {
		t.Fatalf("Setup records %d tunnel routes, want %d", len(tunnel), len(ps))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	have, _, err = func() (map[kernelRoute]bool, map[netip.Prefix]bool, error) {
		s2 := newSetup(t)
		return s2.kernelRoutes()
	}()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if have[kernelRoute{p, e.tun.Attrs().Index, netip.Addr{}}] {
			t.Fatalf("route %s left after Close", p)
		}
	}
}
