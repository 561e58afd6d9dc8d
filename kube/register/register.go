package register

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/internal/promreg"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// FieldManager owns the status fields a gateway applies.
const FieldManager = "bridgehead-gateway"

// DefaultInterval is the least time between two writes.
const DefaultInterval = 3 * time.Second

// Status is what a gateway publishes.
type Status struct {
	PublicKey string
	// PreviousPublicKey, PreviousKeyExpires and KeySignature: during a
	// key rollover, the key the gateway ran with before, when peers stop
	// accepting it, and its signature over the new key
	// (crypto.SignRollover), which the catalog renderer checks.
	PreviousPublicKey  string
	PreviousKeyExpires time.Time
	KeySignature       string
	Endpoint           string
	// Ready is the gateway's readiness (its /readyz); Reason and Message
	// explain it (Reason is a CamelCase word).
	Ready           bool
	Reason, Message string
	RemoteGateways  int32
	RemoteUp        int32
}

// Options configure a Publisher.
type Options struct {
	// Client and Gateway name the object; Client acts as the gateway.
	Client  dynamic.Interface
	Gateway string
	// Source returns the current status; called on each tick.
	Source func() Status
	// Interval is the least time between writes (DefaultInterval).
	Interval time.Duration
	// Ticker makes the tick channel (default time.NewTicker); Now is the
	// clock for condition transition times (default time.Now).
	Ticker func(time.Duration) (<-chan time.Time, func())
	Now    func() time.Time
	Log    *slog.Logger
	// Registry receives bridgehead_gateway_status_writes_total; nil
	// means none.
	Registry prometheus.Registerer
}

// Publisher keeps a Gateway's status current. Make it with New.
type Publisher struct {
	o      Options
	writes *prometheus.CounterVec
	// Owned by Run: the last status written successfully and when Ready
	// last changed.
	last       *Status
	transition time.Time
}

// New checks o and registers the metric.
func New(o Options) (*Publisher, error) {
	if o.Client == nil || o.Gateway == "" || o.Source == nil {
		return nil, fmt.Errorf("register: Client, Gateway and Source are required")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Ticker == nil {
		o.Ticker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	writes, err := promreg.Results(o.Registry,
		"bridgehead_gateway_status_writes_total",
		"Writes of this gateway's Gateway status to the Kubernetes API, by result (ok, error).")
	if err != nil {
		return nil, err
	}
	return &Publisher{o: o, writes: writes}, nil
}

// Run publishes at once and then on every tick when the status changed,
// until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	tick, stop := p.o.Ticker(p.o.Interval)
	defer stop()
	failing := false
	refused := "" // the last key refusal logged
	for {
		if err := p.publish(ctx); err != nil {
			switch {
			case KeyRefused(err):
				// Until the operator approves the key, the status stays
				// as it was; log each refusal message once, at error:
				// it names the command that approves the key.
				if msg := err.Error(); msg != refused {
					p.o.Log.Error("the API server refused this gateway's key: its Gateway pins another; no peer uses this key until the operator approves it",
						"gateway", p.o.Gateway, "key", p.o.Source().PublicKey, "err", msg)
					refused = msg
				}
			case !failing && ctx.Err() == nil:
				p.o.Log.Warn("publishing the gateway status failed; retrying every interval", "gateway", p.o.Gateway, "interval", p.o.Interval, "err", err)
			}
			failing = true
		} else if failing {
			p.o.Log.Info("publishing the gateway status works again", "gateway", p.o.Gateway)
			failing, refused = false, ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}

// KeyRefused reports whether err is the API server refusing a status
// write because the Gateway pins another key (the admission policy
// bridgehead-gateway-key-pin, deploy/kubernetes/gateway-keys.yaml).
func KeyRefused(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "--approve-key")
}

// publish writes the status when it differs from the last one written.
func (p *Publisher) publish(ctx context.Context) error {
	s := p.o.Source()
	if p.last != nil && *p.last == s {
		return nil
	}
	if p.last == nil || p.last.Ready != s.Ready || p.transition.IsZero() {
		p.transition = p.o.Now()
	}
	data, err := json.Marshal(applyObject(p.o.Gateway, s, p.transition))
	if err != nil {
		return err
	}
	force := true
	_, err = p.o.Client.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)).Patch(ctx, p.o.Gateway,
		types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, "status")
	if err != nil {
		p.writes.WithLabelValues("error").Inc()
		return err
	}
	p.writes.WithLabelValues("ok").Inc()
	if p.last == nil || p.last.Ready != s.Ready || p.last.PublicKey != s.PublicKey || p.last.Endpoint != s.Endpoint || p.last.PreviousPublicKey != s.PreviousPublicKey {
		p.o.Log.Info("gateway status published", "gateway", p.o.Gateway, "ready", s.Ready, "endpoint", s.Endpoint, "remoteUp", s.RemoteUp, "remote", s.RemoteGateways)
	}
	p.last = &s
	return nil
}

// applyObject is the server-side-apply body: the fields this manager owns.
func applyObject(name string, s Status, transition time.Time) map[string]any {
	cond := map[string]any{
		"type":               v1.ConditionReady,
		"status":             string(metav1.ConditionFalse),
		"reason":             s.Reason,
		"message":            s.Message,
		"lastTransitionTime": transition.UTC().Format(time.RFC3339),
	}
	if s.Ready {
		cond["status"] = string(metav1.ConditionTrue)
	}
	if s.Reason == "" {
		cond["reason"] = map[bool]string{true: "Forwarding", false: "NotReady"}[s.Ready]
	}
	status := map[string]any{
		"remoteGateways":   s.RemoteGateways,
		"remoteGatewaysUp": s.RemoteUp,
		"conditions":       []any{cond},
	}
	if s.PublicKey != "" {
		status["publicKey"] = s.PublicKey
	}
	// Fields this manager leaves out are removed by the apply: the
	// previous key disappears from the status when its overlap ends.
	if s.PreviousPublicKey != "" {
		status["previousPublicKey"] = s.PreviousPublicKey
		status["previousKeyExpires"] = s.PreviousKeyExpires.UTC().Format(time.RFC3339)
	}
	if s.KeySignature != "" {
		status["keySignature"] = s.KeySignature
	}
	if s.Endpoint != "" {
		status["endpoint"] = s.Endpoint
	}
	return map[string]any{
		"apiVersion": v1.SchemeGroupVersion.String(),
		"kind":       "Gateway",
		"metadata":   map[string]any{"name": name},
		"status":     status,
	}
}
