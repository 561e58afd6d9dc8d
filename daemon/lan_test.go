package daemon

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

// TestLANWatch: a broken LAN side makes /readyz answer 503 with the
// problem, tells the router (which tells remote gateways), and is logged
// once per change, not once per check.
func TestLANWatch(t *testing.T) {
	g, _ := newLabAB(t).startA(t)
	var logs bytes.Buffer
	problem := ""
	g.lan = lanWatch{
		log:     slog.New(slog.NewTextHandler(&logs, nil)),
		cfg:     g.cfg.Load,
		probe:   func(*config.Config, lanSide) string { return problem },
		deliver: g.r.SetCanDeliver,
	}
	readyz := readyz(t, g)

	g.lan.check()
	if code, rep := readyz(); rep.LAN != "" || !g.r.CanDeliver() {
		t.Fatalf("healthy LAN: /readyz %d %+v, router can deliver %v", code, rep, g.r.CanDeliver())
	}
	problem = "LAN interface lan is down"
	for range 5 {
		g.lan.check()
	}
	code, rep := readyz()
	if code != http.StatusServiceUnavailable || rep.Ready || rep.LAN != problem || g.r.CanDeliver() {
		t.Fatalf("broken LAN: /readyz %d %+v, router can deliver %v", code, rep, g.r.CanDeliver())
	}
	if st := g.status(); st.LAN != problem || st.Ready {
		t.Errorf("status with a broken LAN: ready %v, lan %q", st.Ready, st.LAN)
	}
	problem = ""
	for range 5 {
		g.lan.check()
	}
	if _, rep := readyz(); rep.LAN != "" || !g.r.CanDeliver() {
		t.Fatalf("LAN back: %+v, router can deliver %v", rep, g.r.CanDeliver())
	}
	if n := strings.Count(logs.String(), "\n"); n != 2 {
		t.Errorf("%d log lines for one failure and its repair, want 2:\n%s", n, logs.String())
	}
}
