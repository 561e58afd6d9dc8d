package scale

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/bench/catalog"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// TestFarmSessions: a farm of remote gateways on loopback sets up a
// session with an in-process gateway by itself (configured keepalives),
// and its counters see the handshakes. No root needed: real UDP sockets
// on 127.x addresses of the current namespace.
func TestFarmSessions(t *testing.T) {
	port := uint16(20000 + os.Getpid()%20000)
	cat, err := catalog.New(catalog.Options{Sites: 4, Gateways: 2, Prefixes: 40,
		EndpointBase: netip.MustParseAddr("127.213.0.1"), Port: port, Keepalive: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The gateway under test: site 0, gateway 0, peering with every
	// gateway of the other sites.
	target := cat.Sites[0].Gateways[0]
	priv, err := bhcrypto.ParsePrivateKey(target.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	bind, err := udp.Listen(target.Endpoint, udp.Options{RecvBuffer: -1, SendBuffer: -1})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := router.New(router.Options{TUN: tun.NewChannel("gw", 1420), Bind: bind, Logger: slog.New(slog.DiscardHandler),
		Identity: &bhcrypto.Identity{Private: priv, Public: priv.PublicKey(), Cipher: bhcrypto.AESGCM, Prologue: bhcrypto.Prologue("scale")}})
	if err != nil {
		t.Fatal(err)
	}
	rc := &router.Config{LocalSite: cat.Sites[0].Name}
	for _, s := range cat.Sites {
		sc := router.SiteConfig{Name: s.Name, Prefixes: append([]netip.Prefix{s.NodeCIDR}, s.Pods...)}
		for _, g := range s.Gateways {
			k, err := bhcrypto.ParsePublicKey(g.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			sc.Gateways = append(sc.Gateways, router.PeerConfig{Name: g.Name, PublicKey: k, Endpoint: g.Endpoint, Keepalive: time.Second})
		}
		rc.Sites = append(rc.Sites, sc)
	}
	if err := gw.SetConfig(rc); err != nil {
		t.Fatal(err)
	}

	farm, err := NewFarm(FarmOptions{Catalog: cat, Keepalive: time.Second, Cipher: bhcrypto.AESGCM, Cluster: "scale"})
	if err != nil {
		t.Fatal(err)
	}
	if len(farm.Routers) != 6 {
		t.Fatalf("%d farm routers, want 6 (3 remote sites x 2)", len(farm.Routers))
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	gwDone, farmDone := make(chan error, 1), make(chan error, 1)
	go func() { gwDone <- gw.Run(ctx) }()
	go func() { farmDone <- farm.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-gwDone; err != nil {
			t.Error(err)
		}
		if err := <-farmDone; err != nil {
			t.Error(err)
		}
	}()
	before := FarmCounters{Drops: map[string]uint64{}}
	deadline := time.Now().Add(20 * time.Second) // a failure bound, not a measurement
	// The router makes a session current before it counts the handshake
	// completed (router/handshake.go, outside.go confirm), so a poll can
	// see the session and not yet the count: wait for both.
	n := len(farm.Routers)
	for farm.Sessions(start) < n || farm.Counters().Sub(before).HandshakesCompleted < uint64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d of %d farm routers have a session and the farm counted %d completed handshakes, want at least %d",
				farm.Sessions(start), n, farm.Counters().Sub(before).HandshakesCompleted, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := farm.Sessions(time.Now().Add(time.Hour)); n != 0 {
		t.Errorf("Sessions(future) = %d, want 0", n)
	}
}
