package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// unreachableBind fails every send as a socket without a route to the
// endpoints does (ENETUNREACH) and receives nothing until closed.
type unreachableBind struct {
	local  netip.AddrPort
	closed chan struct{}
	once   sync.Once
}

func (b *unreachableBind) Receive([][]byte, []int, []netip.AddrPort) (int, error) {
	<-b.closed
	return 0, udp.ErrClosed
}
func (b *unreachableBind) Send([][]byte, netip.AddrPort) error {
	return fmt.Errorf("sendmmsg: %w", syscall.ENETUNREACH)
}
func (b *unreachableBind) BatchSize() int            { return 64 }
func (b *unreachableBind) LocalAddr() netip.AddrPort { return b.local }
func (b *unreachableBind) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// countingHandler counts the records a logger at Info level would write,
// keeping them for the failure message. Safe for concurrent use.
type countingHandler struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []slog.Attr
}

func newCountingHandler() countingHandler {
	return countingHandler{mu: new(sync.Mutex), lines: new([]string)}
}

func (h countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.lines = append(*h.lines, b.String())
	return nil
}
func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler         { return h }

func (h countingHandler) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), *h.lines...)
}

// TestUnreachableGatewaysLogQuietly: a gateway that cannot reach 50
// remote gateways for 60 s writes a state change and a summary, not a
// line per gateway per retry (issue #19, item 11; the field report was
// 7,987 lines in 80 s for 597 gateways).
func TestUnreachableGatewaysLogQuietly(t *testing.T) {
	const sites, perSite = 10, 5
	clock := newFakeClock()
	id := newIdentity(t, bhcrypto.AESGCM)
	cfg := &Config{LocalSite: "site-a", Sites: []SiteConfig{
		{Name: "site-a", Prefixes: siteAPrefixes, Gateways: []PeerConfig{{Name: "gw-a1", PublicKey: id.Public, Endpoint: netip.MustParseAddrPort("192.0.2.1:51820")}}},
	}}
	for s := range sites {
		sc := SiteConfig{Name: fmt.Sprintf("site-%d", s), Prefixes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(s), 0}), 24)}}
		for g := range perSite {
			sc.Gateways = append(sc.Gateways, PeerConfig{Name: fmt.Sprintf("gw-%d-%d", s, g), PublicKey: newIdentity(t, bhcrypto.AESGCM).Public,
				Endpoint: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(s), byte(g + 1)}), 51820)})
		}
		cfg.Sites = append(cfg.Sites, sc)
	}
	h := newCountingHandler()
	bind := &unreachableBind{local: netip.MustParseAddrPort("192.0.2.1:51820"), closed: make(chan struct{})}
	r, err := New(Options{TUN: tun.NewChannel("bh-flood", 1420), Bind: bind, Identity: id, Clock: clock, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, "the handshake loop's ticker", func() bool {
		clock.mu.Lock()
		defer clock.mu.Unlock()
		return len(clock.ticks) > 0
	})
	step := func(d time.Duration) {
		for range d / TimerTick {
			clock.Advance(TimerTick)
		}
	}
	step(60 * time.Second)
	lines := h.all()
	t.Logf("%d unreachable gateways for 60 s: %d log lines, %d initiations", sites*perSite, len(lines), r.Handshakes().Initiated)
	for _, l := range lines {
		t.Log(l)
	}
	if len(lines) >= 20 {
		t.Errorf("%d log lines in 60 s, want fewer than 20", len(lines))
	}
	// Past a minute, the summary; past RekeyAttemptTime, the attempts
	// give up and start again: still no line per gateway.
	step(65 * time.Second)
	more := h.all()[len(lines):]
	for _, l := range more {
		t.Log(l)
	}
	if !slices.ContainsFunc(more, func(l string) bool { return strings.Contains(l, "gateways still unreachable count=50") }) {
		t.Error("no summary of the 50 unreachable gateways after a minute")
	}
	if len(more) > 3 {
		t.Errorf("%d more lines in the next 65 s, want the summaries only", len(more))
	}
	if n := r.hs.reach.unreachable.Load(); n != sites*perSite {
		t.Errorf("unreachable gauge %d, want %d", n, sites*perSite)
	}
	var sendErrs uint64
	for _, p := range r.Peers() {
		sendErrs += p.HandshakeSendErrors
	}
	if sendErrs < sites*perSite {
		t.Errorf("%d send errors counted, want one per gateway at least", sendErrs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestLivenessChangesLoggedTogether: 50 gateways going down in one probe
// round (a WAN cut), then coming back, write one line each way, not one
// per gateway.
func TestLivenessChangesLoggedTogether(t *testing.T) {
	r := newHotPair(t, bhcrypto.AESGCM).a
	h := newCountingHandler()
	log := slog.New(h)
	now := r.clock.Now()
	var peers []*Peer
	for i := range 50 {
		p := newPeer(PeerConfig{Site: "site-x", Name: fmt.Sprintf("gw-%d", i),
			Endpoint: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), 51820)}, 1, 64, r.clock.Now, r.mono)
		peers = append(peers, p)
	}
	for _, p := range peers {
		p.live.state.Store(uint32(LiveDown))
		r.probe.logChange(p, LiveUp, now)
	}
	r.hs.reach.flush(log, peers, now)
	for _, p := range peers {
		p.live.state.Store(uint32(LiveUp))
		r.probe.logChange(p, LiveDown, now)
	}
	r.hs.reach.flush(log, peers, now)
	lines := h.all()
	for _, l := range lines {
		t.Log(l)
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "count=50") || !strings.Contains(lines[1], "gateways up again count=50") {
		t.Errorf("%d lines for 50 gateways down and up again, want 2 with count=50", len(lines))
	}
}
