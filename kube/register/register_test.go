package register

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/internal/gatewaytest"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

const (
	key1 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	key2 = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
)

// source is a Status the test changes between ticks.
type source struct {
	mu sync.Mutex
	s  Status
}

func (s *source) get() Status         { s.mu.Lock(); defer s.mu.Unlock(); return s.s }
func (s *source) set(f func(*Status)) { s.mu.Lock(); defer s.mu.Unlock(); f(&s.s) }

// TestPublisherRealAPIServer: with the gateway's own credential, a
// Publisher writes key, endpoint, readiness and counts into its Gateway's
// status, leaves the controller's condition alone, coalesces changes
// between ticks into one write, writes nothing when nothing changed, and
// catches up after the API server was away.
func TestPublisherRealAPIServer(t *testing.T) {
	api := gatewaytest.Start(t, "../../deploy/kubernetes/crds")
	ctx := context.Background()
	gwRes := api.Gateways
	api.CreateGateway(t, "east.gw1", "east", "10.1.0.5")
	u, err := gwRes.Get(ctx, "east.gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The controller's condition, under its own field manager.
	_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{
		"type": v1.ConditionValid, "status": "True", "reason": "Checked", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
	}}, "status", "conditions")
	if _, err := gwRes.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "bridgehead-controller"}); err != nil {
		t.Fatal(err)
	}
	// The gateway's credential: its ServiceAccount and own-status role.
	gwClient := api.Client(t, "east.gw1")

	src := &source{s: Status{PublicKey: key1, Endpoint: "203.0.113.5:51820", Ready: true, RemoteGateways: 3, RemoteUp: 2}}
	tick := make(chan time.Time)
	p, err := New(Options{
		Client: gwClient, Gateway: "east.gw1", Source: src.get, Interval: time.Second,
		Ticker:   func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} },
		Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ok := func() int { return int(testutil.ToFloat64(p.writes.WithLabelValues("ok"))) }
	failed := func() int { return int(testutil.ToFloat64(p.writes.WithLabelValues("error"))) }
	// Run takes a tick only after the publish before it finished, so of
	// two sends the second returns once the first one's publish is done.
	sync := func() { tick <- time.Now() }

	// RBAC objects created a moment ago reach the API server's
	// authorizer through an informer: until then the write is refused,
	// and the next tick retries it, as a gateway's would.
	for deadline := time.Now().Add(30 * time.Second); ; {
		sync()
		if ok() >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write within 30 s (%d failed)", failed())
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := status(t, gwRes)
	if st.PublicKey != key1 || st.Endpoint != "203.0.113.5:51820" || st.RemoteGatewaysUp != 2 || st.RemoteGateways != 3 {
		t.Errorf("published status %+v", st)
	}
	if c := cond(st, v1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready condition %+v", c)
	}
	if c := cond(st, v1.ConditionValid); c == nil || c.Reason != "Checked" {
		t.Errorf("the controller's Valid condition is gone: %+v", st.Conditions)
	}
	if ok() != 1 {
		t.Errorf("%d writes after the first publish, want 1", ok())
	}

	// Nothing changed: no write.
	sync()
	sync()
	if ok() != 1 {
		t.Errorf("%d writes with nothing changed, want 1", ok())
	}
	// A flapping readiness and a new key between two ticks: one write,
	// of the last state.
	// (One set: the publish the last tick started may still be reading.)
	src.set(func(s *Status) {
		for i := range 5 {
			s.Ready, s.RemoteUp = i%2 == 0, int32(i)
		}
		s.PublicKey, s.Ready, s.Reason = key2, false, "NoSession"
	})
	sync()
	sync()
	if ok() != 2 {
		t.Errorf("%d writes after a burst of changes, want 2", ok())
	}
	st = status(t, gwRes)
	if c := cond(st, v1.ConditionReady); st.PublicKey != key2 || c == nil || c.Status != metav1.ConditionFalse || c.Reason != "NoSession" {
		t.Errorf("after the burst: %+v", st)
	}

	// API server away: the write fails and is retried on later ticks.
	if err := api.Env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	src.set(func(s *Status) { s.Ready = true; s.Reason = "" })
	sync()
	sync()
	if failed() == 0 {
		t.Errorf("no failed write while the API server was away")
	}
	if err := api.Env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	// A restarted API server may refuse for a moment after /readyz (its
	// RBAC and admission caches filling): the next ticks retry, as a
	// gateway's would, until the write lands (the bound is a failure's).
	for deadline := time.Now().Add(30 * time.Second); ; {
		sync()
		sync()
		st = status(t, gwRes)
		if c := cond(st, v1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the API server came back: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("writes: %d ok, %d failed", ok(), failed())
}

func status(t *testing.T, r dynamic.ResourceInterface) v1.GatewayStatus {
	t.Helper()
	u, err := r.Get(context.Background(), "east.gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var g v1.Gateway
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g); err != nil {
		t.Fatal(err)
	}
	return g.Status
}

func cond(s v1.GatewayStatus, typ string) *metav1.Condition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == typ {
			return &s.Conditions[i]
		}
	}
	return nil
}

// TestApplyObjectRollover: during a key rollover the status carries the
// previous key, its end and the signature; outside one it names none, so
// the server-side apply removes them.
func TestApplyObjectRollover(t *testing.T) {
	until := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		s    Status
		want map[string]any
	}{
		{"rollover", Status{PublicKey: "new", PreviousPublicKey: "old", PreviousKeyExpires: until, KeySignature: "sig"},
			map[string]any{"publicKey": "new", "previousPublicKey": "old", "previousKeyExpires": "2026-12-07T08:00:00Z", "keySignature": "sig"}},
		{"none", Status{PublicKey: "new"}, map[string]any{"publicKey": "new"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status := applyObject("gw", tc.s, until)["status"].(map[string]any)
			for _, k := range []string{"publicKey", "previousPublicKey", "previousKeyExpires", "keySignature"} {
				if got, want := status[k], tc.want[k]; got != want {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
		})
	}
}
