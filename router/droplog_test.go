package router

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogDropsQuietForLinkLocal: the kernel's own link-scoped packets on
// the TUN (MLD reports, router solicitations) are counted as not_unicast
// and logged at debug, never as a warning; every other reason still warns.
func TestLogDropsQuietForLinkLocal(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	r := &Router{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), mono: newMonoEpoch(now.Add(-DropLogInterval))}
	r.hs = &handshaker{r: r}

	r.drops.Add(Inside, ReasonNotUnicast, 2)
	r.hs.logDrops(now)
	out := buf.String()
	if strings.Contains(out, "level=WARN") {
		t.Fatalf("not_unicast drops warned:\n%s", out)
	}
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "inside.not_unicast=2") {
		t.Fatalf("not_unicast drops not logged at debug:\n%s", out)
	}
	if got := r.drops.Get(Inside, ReasonNotUnicast); got != 2 {
		t.Fatalf("not_unicast counted %d, want 2", got)
	}

	buf.Reset()
	now = now.Add(DropLogInterval)
	r.drops.Add(Inside, ReasonNotUnicast, 1)
	r.drops.Add(Inside, ReasonNoRoute, 3)
	r.hs.logDrops(now)
	out = buf.String()
	var warn string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=WARN") {
			warn = l
		}
	}
	if !strings.Contains(warn, "inside.no_route=3") || strings.Contains(warn, "not_unicast") {
		t.Fatalf("want a warning for no_route only, got:\n%s", out)
	}
	if !strings.Contains(out, "inside.not_unicast=1") {
		t.Fatalf("second not_unicast drop not logged at debug:\n%s", out)
	}
}
