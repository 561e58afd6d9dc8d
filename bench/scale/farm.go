package scale

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/bridgehead/bridgehead/bench/catalog"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// Farm is N remote gateways in one process: one router.Router each, with
// its own UDP socket (bound in the measurement's network namespace) and an
// in-memory TUN. Each knows only its own site and the gateway under test,
// so all UDP traffic in the namespace is between that gateway and the
// farm. Build it with NewFarm, start it with Run; Routers is read-only
// after NewFarm.
type Farm struct {
	Routers []*router.Router
	// Names are "site/gateway" of each router, in the same order.
	Names []string
}

// FarmOptions shape a farm.
type FarmOptions struct {
	// Catalog is the address plan; every gateway of every site but Local
	// is a farm router.
	Catalog *catalog.Catalog
	// Local is the site of the gateway under test; Target its index.
	Local, Target int
	// Netns is the namespace to bind the sockets in ("" for the current).
	Netns string
	// Keepalive toward the gateway under test (the sites' keepalive).
	Keepalive time.Duration
	// Cipher and Cluster must match the gateway's config.
	Cipher  bhcrypto.CipherKind
	Cluster string
}

// NewFarm builds the routers and binds their sockets. On error every
// socket opened so far is closed.
func NewFarm(o FarmOptions) (f *Farm, err error) {
	c := o.Catalog
	local := c.Sites[o.Local]
	target := local.Gateways[o.Target]
	targetKey, err := bhcrypto.ParsePublicKey(target.PublicKey)
	if err != nil {
		return nil, err
	}
	var binds []udp.Bind
	defer func() {
		if err != nil {
			for _, b := range binds {
				b.Close()
			}
		}
	}()
	// Sockets belong to the namespace of the thread that creates them.
	err = inNetns(o.Netns, func() error {
		for i, s := range c.Sites {
			if i == o.Local {
				continue
			}
			for _, g := range s.Gateways {
				b, err := udp.Listen(g.Endpoint, udp.Options{BatchSize: 16, RecvBuffer: 1 << 18, SendBuffer: 1 << 18})
				if err != nil {
					return fmt.Errorf("farm: listen %s: %w", g.Endpoint, err)
				}
				binds = append(binds, b)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f = &Farm{}
	k := 0
	for i, s := range c.Sites {
		if i == o.Local {
			continue
		}
		for _, g := range s.Gateways {
			priv, err := bhcrypto.ParsePrivateKey(g.PrivateKey)
			if err != nil {
				return nil, err
			}
			id := &bhcrypto.Identity{Private: priv, Public: priv.PublicKey(), Cipher: o.Cipher, Prologue: bhcrypto.Prologue(o.Cluster)}
			r, err := router.New(router.Options{
				TUN: tun.NewChannel(fmt.Sprintf("farm%d", k), 1420), Bind: binds[k], Identity: id,
				Logger: slog.New(slog.DiscardHandler), QueueLen: 4,
			})
			if err != nil {
				return nil, err
			}
			own := router.SiteConfig{Name: s.Name, Prefixes: append([]netip.Prefix{s.NodeCIDR}, s.Pods...)}
			gw := router.SiteConfig{Name: local.Name, Prefixes: append([]netip.Prefix{local.NodeCIDR}, local.Pods...),
				Gateways: []router.PeerConfig{{Name: target.Name, PublicKey: targetKey, Endpoint: target.Endpoint, Keepalive: o.Keepalive}}}
			if err := r.SetConfig(&router.Config{LocalSite: s.Name, Sites: []router.SiteConfig{own, gw}}); err != nil {
				return nil, err
			}
			f.Routers = append(f.Routers, r)
			f.Names = append(f.Names, s.Name+"/"+g.Name)
			k++
		}
	}
	return f, nil
}

// Run runs every router until ctx is done and returns the first error.
func (f *Farm) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(f.Routers))
	for _, r := range f.Routers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Sessions counts the farm routers whose session with the gateway under
// test was created at or after since.
func (f *Farm) Sessions(since time.Time) int {
	n := 0
	for _, r := range f.Routers {
		for _, p := range r.Peers() {
			if !p.SessionCreated.IsZero() && !p.SessionCreated.Before(since) {
				n++
			}
		}
	}
	return n
}

// FarmCounters are sums over the farm.
type FarmCounters struct {
	// Drops by "direction/reason".
	Drops map[string]uint64
	// Handshakes with the gateway under test, by result.
	HandshakesInitiated, HandshakesAnswered, HandshakesCompleted, HandshakesFailed uint64
	// TxPackets and RxPackets with the gateway under test.
	TxPackets, RxPackets uint64
}

// Counters sums the farm's counters.
func (f *Farm) Counters() FarmCounters {
	c := FarmCounters{Drops: map[string]uint64{}}
	for _, r := range f.Routers {
		for _, d := range []router.Direction{router.Inside, router.Outside} {
			for _, reason := range router.Reasons() {
				if n := r.Drops().Get(d, reason); n > 0 {
					c.Drops[d.String()+"/"+reason.String()] += n
				}
			}
		}
		for _, p := range r.Peers() {
			c.HandshakesInitiated += p.HandshakesInitiated
			c.HandshakesAnswered += p.HandshakesAnswered
			c.HandshakesCompleted += p.HandshakesCompleted
			c.HandshakesFailed += p.HandshakesFailed
			c.TxPackets += p.TxPackets
			c.RxPackets += p.RxPackets
		}
	}
	return c
}

// Sub returns c - b for every counter.
func (c FarmCounters) Sub(b FarmCounters) FarmCounters {
	d := FarmCounters{Drops: map[string]uint64{},
		HandshakesInitiated: c.HandshakesInitiated - b.HandshakesInitiated,
		HandshakesAnswered:  c.HandshakesAnswered - b.HandshakesAnswered,
		HandshakesCompleted: c.HandshakesCompleted - b.HandshakesCompleted,
		HandshakesFailed:    c.HandshakesFailed - b.HandshakesFailed,
		TxPackets:           c.TxPackets - b.TxPackets,
		RxPackets:           c.RxPackets - b.RxPackets,
	}
	for k, v := range c.Drops {
		if n := v - b.Drops[k]; n > 0 {
			d.Drops[k] = n
		}
	}
	return d
}

// inNetns runs fn on a thread switched into the named namespace.
func inNetns(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked, so the runtime retires it with the
		// goroutine rather than reuse it in the wrong namespace.
		return fmt.Errorf("netns: back to the original namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}
