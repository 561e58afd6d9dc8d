package follow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
)

func TestErrorReason(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	refused := &url.Error{Op: "Get", URL: "https://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refused, reasonRefused},
		{fmt.Errorf("failed to list: %w", counted{refused}), reasonRefused},
		{apierrors.NewForbidden(cm, "x", errors.New("no")), reasonForbidden},
		{apierrors.NewUnauthorized("no"), reasonUnauthorized},
		{apierrors.NewResourceExpired("too old"), reasonExpired},
		{apierrors.NewGone("gone"), reasonExpired},
		{apierrors.NewTooManyRequests("slow down", 1), reasonThrottled},
		{apierrors.NewTimeoutError("t", 1), reasonTimeout},
		{context.DeadlineExceeded, reasonTimeout},
		{apierrors.NewInternalError(errors.New("boom")), reasonServer},
		{apierrors.NewServiceUnavailable("later"), reasonServer},
		{io.ErrUnexpectedEOF, reasonReset},
		{os.NewSyscallError("read", syscall.ECONNRESET), reasonReset},
		{errShortWatch, reasonReset},
		{errors.New("something else"), reasonOther},
	} {
		if got := errorReason(tc.err); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.err, got, tc.want)
		}
	}
}

// TestConnTransitions: connected only when every source's last request
// succeeded; one line when it stops (or fails at start), one when it is
// back; retries and expired watches are counted, not logged.
func TestConnTransitions(t *testing.T) {
	var logs syncbuf.Buffer
	var m metrics
	if err := m.register(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newConn(slog.New(slog.NewTextHandler(&logs, nil)), clk, &m, "base", "slices")
	ctx := context.Background()
	refused := os.NewSyscallError("connect", syscall.ECONNREFUSED)
	lines := func() (down, up int) {
		s := logs.String()
		return strings.Count(s, "cannot reach the API server"), strings.Count(s, "reaches the API server again")
	}
	step := func(what string, do func(), connected float64, down, up int) {
		t.Helper()
		do()
		if got := testutil.ToFloat64(m.connected); got != connected {
			t.Errorf("%s: connected %v, want %v", what, got, connected)
		}
		if d, u := lines(); d != down || u != up {
			t.Errorf("%s: %d down and %d up lines, want %d and %d:\n%s", what, d, u, down, up, logs.String())
		}
	}
	step("base lists", func() { c.ok("base") }, 0, 0, 0)
	step("slices lists", func() { c.ok("slices") }, 1, 0, 0)
	if testutil.ToFloat64(m.lastSync) != 1000 {
		t.Errorf("last sync %v", testutil.ToFloat64(m.lastSync))
	}
	step("an expired watch", func() { c.handlerError(ctx, "base", apierrors.NewResourceExpired("old")) }, 1, 0, 0)
	step("refused", func() {
		if err := c.failed(ctx, "base", refused); !errors.As(err, new(counted)) {
			t.Errorf("failed returned %v unmarked", err)
		}
	}, 0, 1, 0)
	step("retries", func() {
		for range 5 {
			c.failed(ctx, "base", refused)
			c.failed(ctx, "slices", refused)
			c.handlerError(ctx, "slices", fmt.Errorf("failed to list: %w", counted{refused})) // seen already
		}
	}, 0, 1, 0)
	clk.Step(7 * time.Second)
	step("base back", func() { c.ok("base") }, 0, 1, 0)
	step("slices back", func() { c.ok("slices") }, 1, 1, 1)
	step("a short watch", func() { c.handlerError(ctx, "slices", errors.New("very short watch: unexpected watch close")) }, 0, 2, 1)
	stopping, cancel := context.WithCancel(ctx)
	cancel()
	step("stopping", func() { c.failed(stopping, "base", refused) }, 0, 2, 1)
	if got := testutil.ToFloat64(m.watchErrors.WithLabelValues(reasonRefused)); got != 11 {
		t.Errorf("refused counted %v, want 11", got)
	}
	for _, r := range []string{reasonExpired, reasonReset} {
		if got := testutil.ToFloat64(m.watchErrors.WithLabelValues(r)); got != 1 {
			t.Errorf("%s counted %v, want 1", r, got)
		}
	}
	if !strings.Contains(logs.String(), "after=7s errors=11") {
		t.Errorf("the reconnect line lacks the outage's length and errors:\n%s", logs.String())
	}
}
