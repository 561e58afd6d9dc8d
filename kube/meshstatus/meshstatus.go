package meshstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/internal/promreg"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/mesh"
)

// FieldManager owns status.mesh.
const FieldManager = "bridgehead-gateway-mesh"

// Defaults of Options.
const (
	DefaultRefresh = 60 * time.Second
	DefaultMinGap  = 5 * time.Second
)

// Options configure a Publisher.
type Options struct {
	// Client acts as the gateway; Gateway names its object.
	Client  dynamic.Interface
	Gateway string
	// Refresh is the most often rows are written when only RTT, loss or
	// MTU moved (DefaultRefresh); MinGap the least time between two
	// writes (DefaultMinGap).
	Refresh, MinGap time.Duration
	Log             *slog.Logger
	// Registry receives bridgehead_mesh_status_writes_total; nil: none.
	Registry prometheus.Registerer
}

// Publisher keeps a Gateway's status.mesh current. Make it with New.
type Publisher struct {
	o      Options
	writes *prometheus.CounterVec
	// Owned by Step's goroutine: what was last written, and when.
	last    []v1.MeshRow
	lastAt  time.Time
	failing bool
}

// New checks o and registers the metric.
func New(o Options) (*Publisher, error) {
	if o.Client == nil || o.Gateway == "" {
		return nil, fmt.Errorf("meshstatus: Client and Gateway are required")
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.MinGap <= 0 {
		o.MinGap = DefaultMinGap
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	writes, err := promreg.Results(o.Registry,
		"bridgehead_mesh_status_writes_total",
		"Writes of this gateway's mesh rows (status.mesh of its Gateway) to the Kubernetes API, by result (ok, error).")
	if err != nil {
		return nil, err
	}
	return &Publisher{o: o, writes: writes}, nil
}

// Due says whether rows, measured at now, should be written: a state or
// path changed and MinGap passed since the last write, or something else
// changed and Refresh passed.
func (p *Publisher) Due(rows []v1.MeshRow, now time.Time) bool {
	if p.last == nil {
		return true
	}
	since := now.Sub(p.lastAt)
	if since < p.o.MinGap {
		return false
	}
	if !sameShape(p.last, rows) {
		return true
	}
	return since >= p.o.Refresh && !sameValues(p.last, rows)
}

// Step writes rows if they are due (Due), and returns the write's error.
// A failed write is retried at the next Step; the log says once when
// writes start failing and once when they work again.
func (p *Publisher) Step(ctx context.Context, rows []mesh.Row, now time.Time) error {
	st := ToAPI(rows, now)
	if !p.Due(st.Rows, now) {
		return nil
	}
	body, err := ApplyBody(p.o.Gateway, st)
	if err != nil {
		return err
	}
	force := true
	_, err = p.o.Client.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)).Patch(ctx, p.o.Gateway,
		types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, "status")
	if err != nil {
		p.writes.WithLabelValues("error").Inc()
		if !p.failing {
			p.o.Log.Warn("publishing the mesh rows failed; retrying", "gateway", p.o.Gateway, "err", err)
			p.failing = true
		}
		return err
	}
	p.writes.WithLabelValues("ok").Inc()
	if p.failing {
		p.o.Log.Info("publishing the mesh rows works again", "gateway", p.o.Gateway)
		p.failing = false
	}
	p.last, p.lastAt = st.Rows, now
	return nil
}

// ApplyBody is the server-side-apply body that sets name's status.mesh.
func ApplyBody(name string, st *v1.MeshStatus) ([]byte, error) {
	return json.Marshal(map[string]any{
		"apiVersion": v1.SchemeGroupVersion.String(),
		"kind":       "Gateway",
		"metadata":   map[string]any{"name": name},
		"status":     map[string]any{"mesh": st},
	})
}

// ToAPI turns a gateway's rows into its status.mesh, measured at now.
// RTT is rounded to 10 µs and loss to the permille, so noise below
// that is no change.
func ToAPI(rows []mesh.Row, now time.Time) *v1.MeshStatus {
	st := &v1.MeshStatus{ObservedAt: metav1.NewTime(now.Truncate(time.Second)), Rows: make([]v1.MeshRow, 0, len(rows))}
	for _, r := range rows {
		st.Rows = append(st.Rows, v1.MeshRow{
			Site: r.To, State: string(r.State), Path: string(r.Path), Via: r.Via,
			GatewaysUp: int32(r.GatewaysUp), Gateways: int32(r.Gateways),
			RTTMicroseconds: int64(math.Round(r.RTTMs*100)) * 10,
			LossPermille:    int32(math.Round(r.Loss * 1000)),
			MTU:             int32(r.MTU),
			Since:           metav1.NewTime(r.Since.Truncate(time.Second)),
		})
	}
	slices.SortFunc(st.Rows, func(a, b v1.MeshRow) int {
		if a.Site < b.Site {
			return -1
		}
		if a.Site > b.Site {
			return 1
		}
		return 0
	})
	return st
}

// FromGateway turns a Gateway's status.mesh into mesh rows.
func FromGateway(gw *v1.Gateway) []mesh.Row {
	ms := gw.Status.Mesh
	if ms == nil {
		return nil
	}
	rows := make([]mesh.Row, 0, len(ms.Rows))
	for _, r := range ms.Rows {
		rows = append(rows, mesh.Row{
			FromSite: gw.Spec.Site, FromGateway: gw.Name, To: r.Site,
			State: mesh.State(r.State), Path: mesh.Path(r.Path), Via: r.Via,
			GatewaysUp: int(r.GatewaysUp), Gateways: int(r.Gateways),
			RTTMs: float64(r.RTTMicroseconds) / 1000, Loss: float64(r.LossPermille) / 1000, MTU: int(r.MTU),
			Since: r.Since.Time, Measured: ms.ObservedAt.Time,
		})
	}
	return rows
}

// List reads every Gateway's rows with one list call. Each Gateway is a
// source; one without rows says so.
func List(ctx context.Context, client dynamic.Interface) ([]mesh.Row, []mesh.Source, error) {
	l, err := client.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing Gateways: %w", err)
	}
	var rows []mesh.Row
	var srcs []mesh.Source
	for _, u := range l.Items {
		var gw v1.Gateway
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gw); err != nil {
			srcs = append(srcs, mesh.Source{Name: "Gateway " + u.GetName(), Error: err.Error()})
			continue
		}
		r := FromGateway(&gw)
		src := mesh.Source{Name: "Gateway " + gw.Name, Rows: len(r)}
		if gw.Status.Mesh == nil {
			src.Error = "no mesh rows published (gateway down, or older than the mesh view)"
		}
		srcs = append(srcs, src)
		rows = append(rows, r...)
	}
	return rows, srcs, nil
}

// sameShape: the same sites with the same state and path.
func sameShape(a, b []v1.MeshRow) bool {
	return slices.EqualFunc(a, b, func(x, y v1.MeshRow) bool {
		return x.Site == y.Site && x.State == y.State && x.Path == y.Path && slices.Equal(x.Via, y.Via) &&
			x.GatewaysUp == y.GatewaysUp && x.Gateways == y.Gateways
	})
}

// sameValues: sameShape, and the same RTT, loss and MTU.
func sameValues(a, b []v1.MeshRow) bool {
	return sameShape(a, b) && slices.EqualFunc(a, b, func(x, y v1.MeshRow) bool {
		return x.RTTMicroseconds == y.RTTMicroseconds && x.LossPermille == y.LossPermille && x.MTU == y.MTU
	})
}
