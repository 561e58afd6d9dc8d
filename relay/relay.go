// Package relay is the gateway's HTTP CONNECT relay for API-server
// callbacks: kube-apiserver's egress selector (HTTPConnect mode) or
// konnectivity sends "CONNECT 192.168.50.5:10250 HTTP/1.1", the relay
// answers "200 Connection established" and then copies raw bytes both
// ways, half-closes included, without buffering beyond one read.
//
// The relay is never an open proxy: the destination must be an IP
// literal inside a remote site's node CIDRs (pod CIDRs only when
// allowed) on an allowed port. It dials from the gateway's own LAN
// address, so the kernel routes the connection into the TUN like any
// other traffic to the remote site.
//
// Clients are bounded too: an optional allow-list of source prefixes
// (Config.AllowedClients), at most MaxPendingPerSource connections in the
// request phase per source, so that one client cannot hold every slot of
// it, and with TLS a client certificate that chains to the client CA and,
// when pinned, names an allowed identity (LoadTLS, which also reads its
// files again when they change).
//
// Ownership and concurrency: a Relay owns the listeners passed to Serve
// and every connection it accepts or dials, until Close. SetConfig,
// Status and Close are safe from any goroutine. Each client connection
// runs on its own goroutine, plus one more while it relays.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options are New's dependencies.
type Options struct {
	Config Config
	Logger *slog.Logger // nil: discard
	// Registry receives the bridgehead_relay_* metrics (required).
	Registry prometheus.Registerer
	// Dial replaces the dialer toward destinations (tests). nil: a
	// net.Dialer from Config.Source (Source6) bounded by ctx, which
	// carries Config.DialTimeout.
	Dial func(ctx context.Context, src netip.Addr, dst netip.AddrPort) (net.Conn, error)
	// Now is the clock of the idle check (tests: one whose wall time
	// steps). nil: time.Now.
	Now func() time.Time
}

// Relay accepts CONNECT requests and relays the allowed ones.
type Relay struct {
	log  *slog.Logger
	m    *metrics
	dial func(ctx context.Context, src netip.Addr, dst netip.AddrPort) (net.Conn, error)
	now  func() time.Time
	// epoch is when New ran, by now: connections stamp their activity
	// as the duration since it, which the monotonic reading of now's
	// times keeps true when the wall clock steps.
	epoch time.Time
	cfg   atomic.Pointer[Config]

	// beforeRegister, when set (tests, before Serve), runs between a
	// connection's policy check and its registration.
	beforeRegister func()

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops and connection goroutines

	// mu guards the fields below it.
	mu        sync.Mutex
	listeners []net.Listener
	pending   int                    // connections still in the header phase
	pendingBy map[netip.Prefix]int   // pending by client source (sourceKey)
	conns     map[*conn]struct{}     // connections past the policy check
	perDest   map[netip.AddrPort]int // len(conns) by destination
	closed    bool
	listen    string
	refused   map[Reason]uint64
	total     uint64
}

// New builds a relay; Serve starts it.
func New(o Options) (*Relay, error) {
	if err := o.Config.validate(); err != nil {
		return nil, err
	}
	if o.Registry == nil {
		return nil, errors.New("relay: a metrics registry is required")
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, fmt.Errorf("relay: metrics: %w", err)
	}
	r := &Relay{log: o.Logger, m: m, dial: o.Dial, conns: map[*conn]struct{}{},
		perDest: map[netip.AddrPort]int{}, pendingBy: map[netip.Prefix]int{}, refused: map[Reason]uint64{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.dial == nil {
		r.dial = dialTCP
	}
	if r.now = o.Now; r.now == nil {
		r.now = time.Now
	}
	r.epoch = r.now()
	r.ctx, r.cancel = context.WithCancel(context.Background())
	cfg := o.Config
	r.cfg.Store(&cfg)
	return r, nil
}

// dialTCP connects to dst from src through the kernel's routing table.
func dialTCP(ctx context.Context, src netip.Addr, dst netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	if src.IsValid() && src.Is4() == dst.Addr().Unmap().Is4() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	return d.DialContext(ctx, "tcp", dst.String())
}

// Serve accepts connections on ln until Close, which also closes ln.
// It returns nil after Close and the accept error otherwise.
func (r *Relay) Serve(ln net.Listener) error {
	if !r.addListener(ln) {
		return nil
	}
	defer r.wg.Done()
	return r.acceptLoop(ln)
}

// Start is Serve on a goroutine of the relay's own: ln is serving (and
// Status shows its address) when Start returns. An accept error that
// stops it is logged.
func (r *Relay) Start(ln net.Listener) {
	if !r.addListener(ln) {
		return
	}
	go func() {
		defer r.wg.Done()
		if err := r.acceptLoop(ln); err != nil {
			r.log.Error("relay stopped accepting", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// addListener records ln for Close and Status and counts its accept loop
// in wg; false (and ln closed) once the relay is closed.
func (r *Relay) addListener(ln net.Listener) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		ln.Close()
		return false
	}
	r.listeners = append(r.listeners, ln)
	r.listen = ln.Addr().String()
	r.wg.Add(1)
	return true
}

func (r *Relay) acceptLoop(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if r.ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("relay: accept: %w", err)
			}
			// EMFILE, ENFILE, ECONNABORTED: back off and go on.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			r.log.Warn("relay: accept failed; retrying", "err", err, "delay", delay)
			select {
			case <-time.After(delay):
			case <-r.ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		r.accept(c)
	}
}

// accept starts the goroutine of one client, or turns it away at once:
// a source outside allowedClients (closed without a word), or when
// maxConnections clients in all, or maxPendingPerSource from its source,
// are already sending their request.
func (r *Relay) accept(nc net.Conn) {
	cfg := r.cfg.Load()
	src := remoteAddr(nc)
	if !cfg.clientAllowed(src) {
		r.refuse(ReasonClientNotAllowed)
		r.accessLog(nc.RemoteAddr().String(), "", "", ReasonClientNotAllowed, "not in allowedClients", 0, 0, 0, "")
		nc.Close()
		return
	}
	key := sourceKey(src)
	r.mu.Lock()
	reason, why := ReasonNone, ""
	switch {
	case r.closed:
		r.mu.Unlock()
		nc.Close()
		return
	case r.pending >= cfg.MaxConnections:
		reason, why = ReasonLimit, "too many connections in the request phase"
	case r.pendingBy[key] >= cfg.maxPendingPerSource():
		reason, why = ReasonSourceLimit, fmt.Sprintf("%d connections from %s in the request phase (maxPendingPerSource)", cfg.maxPendingPerSource(), key)
	}
	if reason != ReasonNone {
		r.mu.Unlock()
		r.refuse(reason)
		r.accessLog(nc.RemoteAddr().String(), "", "", reason, why, 0, 0, 0, "")
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		writeStatus(nc, reason, "relay: "+why+"\n")
		nc.Close()
		return
	}
	r.pending++
	r.pendingBy[key]++
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.handle(nc, cfg, key)
	}()
}

// endPending ends one connection's request phase. Callers hold mu.
func (r *Relay) endPending(key netip.Prefix) {
	r.pending--
	if r.pendingBy[key]--; r.pendingBy[key] <= 0 {
		delete(r.pendingBy, key)
	}
}

// remoteAddr is nc's peer address (invalid when it is not IP).
func remoteAddr(nc net.Conn) netip.Addr {
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// refuse counts a refusal.
func (r *Relay) refuse(reason Reason) {
	r.m.refused.WithLabelValues(string(reason)).Inc()
	r.mu.Lock()
	r.refused[reason]++
	r.mu.Unlock()
}

// SetConfig replaces the policy and limits. Connections the new allow-
// list no longer admits (their site was removed, their port or pod CIDRs
// disallowed, their client left outside AllowedClients) are closed with
// reason "revoked"; all others continue.
// A changed TLS config applies to new clients.
func (r *Relay) SetConfig(c Config) error {
	if err := c.validate(); err != nil {
		return err
	}
	r.cfg.Store(&c)
	r.mu.Lock()
	var revoke []*conn
	for cn := range r.conns {
		if v := c.decide(cn.dst); v.reason != ReasonNone || !c.clientAllowed(cn.src) {
			revoke = append(revoke, cn)
		}
	}
	r.mu.Unlock()
	for _, cn := range revoke {
		cn.shut(CloseRevoked)
	}
	if len(revoke) > 0 {
		r.log.Info("relay: reload revoked connections", "closed", len(revoke))
	}
	return nil
}

// Close stops accepting, closes every connection (reason "shutdown")
// and waits for their goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	r.cancel()
	var errs []error
	for _, ln := range r.listeners {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	conns := make([]*conn, 0, len(r.conns))
	for cn := range r.conns {
		conns = append(conns, cn)
	}
	r.mu.Unlock()
	for _, cn := range conns {
		cn.shut(CloseShutdown)
	}
	r.wg.Wait()
	return errors.Join(errs...)
}

// Status is the relay's summary for `bridgehead status`.
type Status struct {
	Listen       string       `json:"listen"`
	TLS          bool         `json:"tls"`
	AllowedPorts []uint16     `json:"allowedPorts"`
	Active       int          `json:"active"`
	Total        uint64       `json:"total"`
	Refused      []RefusedBy  `json:"refused"`
	BySite       []SiteActive `json:"bySite"`
}

// RefusedBy is one nonzero refusal counter.
type RefusedBy struct {
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// SiteActive is the open relayed connections to one remote site.
type SiteActive struct {
	Site   string `json:"site"`
	Active int    `json:"active"`
}

// Status returns the relay's current figures.
func (r *Relay) Status() Status {
	cfg := r.cfg.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Listen: r.listen, TLS: cfg.TLS != nil, AllowedPorts: cfg.AllowedPorts,
		Active: len(r.conns), Total: r.total, Refused: []RefusedBy{}, BySite: []SiteActive{}}
	for _, reason := range Reasons() {
		if n := r.refused[reason]; n > 0 {
			st.Refused = append(st.Refused, RefusedBy{Reason: string(reason), Count: n})
		}
	}
	sites := map[string]int{}
	for cn := range r.conns {
		sites[cn.site]++
	}
	for s, n := range sites {
		st.BySite = append(st.BySite, SiteActive{Site: s, Active: n})
	}
	sort.Slice(st.BySite, func(i, j int) bool { return st.BySite[i].Site < st.BySite[j].Site })
	return st
}
