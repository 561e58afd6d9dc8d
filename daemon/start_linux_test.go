//go:build linux

package daemon

import (
	"context"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestRunUnwindsFailedStart: a start step that fails late (the metrics
// address is taken, after the TUN, the sockets, the router and the
// routes are up) releases everything the steps before it acquired: the
// TUN and its routes are gone, the listen port is free again and
// GOMAXPROCS is back where it was.
func TestRunUnwindsFailedStart(t *testing.T) {
	ns := enterNetns(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	l := newLabAB(t)
	if err := os.WriteFile(l.path, []byte("metrics: {listen: "+taken.Addr().String()+"}\n"+mustRead(t, l.path)), 0o644); err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(0)
	err = <-goRunIn(context.Background(), ns, Options{ConfigPath: l.path})
	if err == nil || !strings.Contains(err.Error(), "metrics listen "+taken.Addr().String()) {
		t.Fatalf("Run: %v, want the metrics address refused", err)
	}
	if _, err := netlink.LinkByName("bh-a"); err == nil {
		t.Error("the TUN bh-a is still there")
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst != nil && (r.Dst.String() == "10.102.0.0/16" || r.Dst.String() == "10.2.0.0/24") {
			t.Errorf("route %s is still there", r.Dst)
		}
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:51820")
	if err != nil {
		t.Errorf("the listen port is still held: %v", err)
	} else {
		conn.Close()
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after the failed start, was %d", got, procs)
	}
}
