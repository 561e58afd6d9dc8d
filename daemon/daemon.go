package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/netsetup"
	"github.com/bridgehead/bridgehead/tun"
)

// Options configure Run.
type Options struct {
	ConfigPath string
	Logger     *slog.Logger
	Version    string
	// Ready, if set, is called once the TUN, routes and socket are up.
	Ready func()
	// RekeyAfter shortens the session rekey interval (router.Options);
	// for tests that watch sessions rotate. Zero keeps the default.
	RekeyAfter time.Duration
	// Lanes overrides the config's lanes (router.Lane) when positive.
	Lanes int
	// NoExpress runs without the express lane (router.Options.Express,
	// udp.ListenExpress) whatever the config's express says: sparse
	// flows then share the lanes' sockets.
	NoExpress bool
	// ExpressPriority, if not nil, replaces the config's
	// expressPriority (run --express-priority): 0 turns it off.
	ExpressPriority *int
	// MissingCaps, if set, replaces the check of this process's
	// capabilities that decides whether the default express priority
	// applies (missingRealtimeCaps); for tests.
	MissingCaps func() []string
	// Overrides replace fields of the config file at start and at every
	// reload (run --gateway: one file for a DaemonSet's gateways).
	Overrides config.Overrides
	// Drain, when closed, makes the gateway drain (drain.go: /readyz
	// 503, peers told, forwarding until quiet or drain.timeout) and
	// then return; cancelling ctx still stops it at once. StopSignals
	// makes both from SIGTERM and SIGINT. nil: never.
	Drain <-chan struct{}
}

// Run loads the config and runs the gateway until ctx is cancelled, or
// until it has drained once Options.Drain is closed. It reloads the
// config on SIGHUP and when the file changes. On return every route it
// added is removed and the TUN is gone.
//
// Start-up is a list of steps (start.go), each pushing the undo of what
// it acquires on one stack: a step's error unwinds what the steps before
// it acquired, in reverse order; once the gateway stops, the same stack
// releases everything in the same order.
func Run(ctx context.Context, o Options) error {
	s := newStarter(o)
	defer s.undo.unwind()
	if err := s.followCatalog(ctx); err != nil {
		return err
	}
	for _, step := range []func() error{
		s.loadConfig,    // validate, as every reload does
		s.openDevices,   // TUN queues, sockets, express Ps
		s.attachFilter,  // kernel early-drop filter
		s.buildRouter,   // relay path, router, its config and key ring
		s.applyRoutes,   // kernel routes and link settings
		s.buildGateway,  // reloadable state, metrics, LAN watch, registration, mesh view
		s.listenMetrics, // /metrics, health, mesh endpoints
		s.listenRelay,   // CONNECT relay
		s.listenControl, // control socket
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return s.serve(ctx)
}

// identity reads the private key and builds the handshake identity.
func identity(cfg *config.Config) (*bhcrypto.Identity, error) {
	raw, err := os.ReadFile(cfg.PrivateKeyPath())
	if err != nil {
		return nil, fmt.Errorf("%s: privateKeyFile: %w", cfg.Path, err)
	}
	priv, err := bhcrypto.ParsePrivateKey(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: privateKeyFile %s: %w", cfg.Path, cfg.PrivateKeyFile, err)
	}
	cipher, err := bhcrypto.ParseCipher(cfg.Cipher)
	if err != nil {
		return nil, fmt.Errorf("%s: cipher: %w", cfg.Path, err)
	}
	id := bhcrypto.NewIdentity(priv, cipher, bhcrypto.Prologue(cfg.Cluster.Name))
	if gw := cfg.LocalGateway(); gw != nil && gw.PublicKey != "" {
		listed, err := bhcrypto.ParsePublicKey(gw.PublicKey)
		// A followed catalog may still list a reimaged gateway's old
		// key: the gateway registers its new one (check warns).
		if err == nil && listed != id.Public && !cfg.Follows() {
			return nil, fmt.Errorf("%s: privateKeyFile %s does not match the publicKey listed for gateway %s (it belongs to %s)",
				cfg.Path, cfg.PrivateKeyFile, cfg.Gateway, id.Public)
		}
	}
	return id, nil
}

// tunnelMTU is the TUN's MTU under cfg, which the MSS clamp follows:
// interface.mtu as written; with "auto" derived from the WAN path
// (autoMTU); with the field left out config.DefaultMTU. A gateway whose
// datagrams can go through a hub (config.CanBeRelayed) gets the relay
// header taken off the last two, so a full-size relayed datagram is no
// larger on the WAN than a direct one; a written number is the
// operator's (check warns when it is too large for relayed paths).
// Called once at start: the TUN's MTU does not follow reloads.
func tunnelMTU(cfg *config.Config, log *slog.Logger) (int, error) {
	m := cfg.Interface.MTU
	switch {
	case m.Auto:
		mtu, err := autoMTU(cfg)
		if err != nil {
			return 0, err
		}
		log.Info("tunnel MTU derived from the WAN path", "mtu", mtu, "relay_header", relayHeader(cfg))
		return mtu, nil
	case m.Default && cfg.CanBeRelayed():
		mtu := config.DefaultMTU - bhcrypto.RelayOverhead
		log.Info("tunnel MTU lowered by the relay header: this gateway has no endpoint, so its datagrams can go through a hub",
			"mtu", mtu, "default", config.DefaultMTU, "relay_header", bhcrypto.RelayOverhead)
		return mtu, nil
	}
	return m.Value, nil
}

// relayHeader is what a relay message adds to cfg's datagrams on the
// WAN: bhcrypto.RelayOverhead when they can go through a hub, else 0.
func relayHeader(cfg *config.Config) int {
	if cfg.CanBeRelayed() {
		return bhcrypto.RelayOverhead
	}
	return 0
}

// autoMTU derives the tunnel MTU from the interface that carries traffic
// to each remote gateway, minus the exact encapsulation overhead for the
// outer address family, and the relay header when cfg's datagrams can go
// through a hub (to one of those gateways). It takes the smallest over
// all remote gateways.
func autoMTU(cfg *config.Config) (int, error) {
	best := 0
	for _, s := range cfg.Sites {
		if s.Name == cfg.Site {
			continue
		}
		for _, g := range s.Gateways {
			ep := g.EndpointAddr.Addr()
			if !ep.IsValid() {
				continue // behind NAT: reached through its own sessions or a hub
			}
			link, err := netsetup.PathMTU(ep)
			if err != nil {
				return 0, fmt.Errorf("%s: interface.mtu auto: route to %s/%s at %s: %w", cfg.Path, s.Name, g.Name, ep, err)
			}
			m := link - Overhead(ep.Is4() || ep.Is4In6()) - relayHeader(cfg)
			if best == 0 || m < best {
				best = m
			}
		}
	}
	if best == 0 {
		return config.DefaultMTU - relayHeader(cfg), nil
	}
	if best < 576 {
		return 0, fmt.Errorf("%s: interface.mtu auto: the WAN path leaves only %d bytes for inner packets", cfg.Path, best)
	}
	return best, nil
}

// Overhead is the bytes bridgehead adds around an inner packet on a
// direct path: outer IP and UDP headers, transport header and tag. A
// datagram relayed through a hub carries bhcrypto.RelayOverhead more
// (tunnelMTU leaves room for it). Padding never pushes a packet past the
// tunnel MTU, so it adds nothing here.
func Overhead(ipv4 bool) int {
	ip := 40
	if ipv4 {
		ip = 20
	}
	return ip + 8 + bhcrypto.TransportOverhead
}

func serveMetrics(addr string, g *gateway, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.m.reg, promhttp.HandlerOpts{Registry: g.m.reg}))
	g.healthHandlers(mux)
	g.meshHandlers(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return srv, nil
}

// openTUN opens the TUN with kernel offloads (TSO/USO, GRO) and falls back
// to the portable water backend where the kernel or device lacks them.
func openTUN(name string, mtu int, offload bool, log *slog.Logger) (tun.Device, error) {
	if offload {
		dev, err := tun.OpenOffload(tun.OffloadConfig{Name: name, MTU: mtu}, log)
		if err == nil {
			return dev, nil
		}
		if errors.Is(err, os.ErrPermission) {
			// The portable backend would fail the same way: no
			// fallback, and no warning that suggests one.
			return nil, fmt.Errorf("open TUN %s: %w (needs root or CAP_NET_ADMIN)", name, err)
		}
		log.Warn("TUN offloads unavailable; using the portable backend (one packet per system call)", "interface", name, "err", err)
	} else {
		log.Info("TUN offloads turned off by interface.offload; using the portable backend (one packet per system call)", "interface", name)
	}
	w, werr := tun.OpenWater(tun.WaterConfig{Name: name, MTU: mtu})
	if werr != nil {
		return nil, fmt.Errorf("open TUN %s: %w", name, werr)
	}
	return w, nil
}
