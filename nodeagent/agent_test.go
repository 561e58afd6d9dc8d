package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeRoutes is an in-memory route table. Its mutex guards routes: the
// agent's loop and the test both touch it.
type fakeRoutes struct {
	mu     sync.Mutex
	routes []Route
	events chan<- struct{}
}

func (f *fakeRoutes) Set(want []Route) (RouteChange, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ch RouteChange
	for _, w := range want {
		i := slices.IndexFunc(f.routes, func(r Route) bool { return r.Destination == w.Destination })
		switch {
		case i < 0:
			ch.Added++
		case !slices.Equal(f.routes[i].Vias, w.Vias):
			ch.Replaced++
		}
	}
	for _, h := range f.routes {
		if !slices.ContainsFunc(want, func(r Route) bool { return r.Destination == h.Destination }) {
			ch.Deleted++
		}
	}
	f.routes = slices.Clone(want)
	return ch, nil
}

func (f *fakeRoutes) List() ([]Route, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.routes), nil
}

func (f *fakeRoutes) Watch(ctx context.Context, changed chan<- struct{}, _ func(error)) error {
	f.mu.Lock()
	f.events = changed
	f.mu.Unlock()
	return nil
}

// deleteOne removes a route and notifies, as the kernel would.
func (f *fakeRoutes) deleteOne() {
	f.mu.Lock()
	f.routes = f.routes[1:]
	ev := f.events
	f.mu.Unlock()
	ev <- struct{}{}
}

type fakeSNAT struct{ writes int }

func (f *fakeSNAT) Ensure(*Desired) (bool, error) { f.writes++; return f.writes == 1, nil }

// fakeSource serves models from a list, one per Changed signal.
type fakeSource struct {
	mu      sync.Mutex
	models  []*Desired
	errs    []error
	changed chan struct{}
}

func (s *fakeSource) Load() (*Desired, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.models[0], s.errs[0]
	if len(s.models) > 1 {
		s.models, s.errs = s.models[1:], s.errs[1:]
	}
	return d, err
}

func (s *fakeSource) Changed() <-chan struct{} { return s.changed }

type agentRig struct {
	reg    *prometheus.Registry
	routes *fakeRoutes
	conf   string
	bin    string
	agent  *Agent

	mu       sync.Mutex
	statuses []Status // what the agent handed to Options.Status
}

func (r *agentRig) status() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.statuses)
}

// fakePlugin is a CNI plugin that answers VERSION with versions.
func fakePlugin(versions ...string) []byte {
	return []byte(`#!/bin/sh
echo '{"cniVersion":"1.0.0","supportedVersions":["` + strings.Join(versions, `","`) + `"]}'
`)
}

func newRig(t *testing.T, opts ...func(*Options)) *agentRig {
	t.Helper()
	from, bin := t.TempDir(), t.TempDir()
	for _, n := range CNIPlugins() {
		os.WriteFile(filepath.Join(from, n), fakePlugin("0.4.0", "1.0.0"), 0o755)
	}
	r := &agentRig{reg: prometheus.NewRegistry(), routes: &fakeRoutes{}, conf: t.TempDir(), bin: bin}
	o := Options{Log: slog.New(slog.DiscardHandler), Registry: r.reg, Routes: r.routes, SNAT: &fakeSNAT{},
		CNIConfDir: r.conf, CNIBinDir: bin, CNIPluginsFrom: from, RepairInterval: time.Hour,
		Status: func(st Status) { r.mu.Lock(); r.statuses = append(r.statuses, st); r.mu.Unlock() }}
	for _, f := range opts {
		f(&o)
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.agent = a
	return r
}

func (r *agentRig) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := true
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				ok = ok && found
			}
			if !ok {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

// waitFor polls cond; the bound is a failure bound, not a measurement.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestAgentRun(t *testing.T) {
	c := loadCatalog(t)
	a1, _ := FromConfig(c, "a1")
	rig := newRig(t)
	src := &fakeSource{
		models:  []*Desired{a1, nil, a1},
		errs:    []error{nil, errors.New("catalog.yaml:3: sites[0].name: is required"), nil},
		changed: make(chan struct{}, 1),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rig.agent.Run(ctx, src) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	waitFor(t, "the start sync", func() bool { return rig.metric(t, "bridgehead_node_snat_table_writes_total") == 1 })
	if got := rig.metric(t, "bridgehead_node_routes_installed"); got != float64(len(a1.Routes)) {
		t.Errorf("routes installed %v, want %d", got, len(a1.Routes))
	}
	if rig.metric(t, "bridgehead_node_cni_config_written") != 1 {
		t.Error("cni_config_written is not 1")
	}
	if b, err := os.ReadFile(filepath.Join(rig.conf, CNIConfName)); err != nil || !strings.Contains(string(b), "10.244.1.0/24") {
		t.Errorf("conflist %s %v", b, err)
	}

	// A catalog that does not load: counted, the node keeps its state.
	src.changed <- struct{}{}
	waitFor(t, "the catalog error", func() bool { return rig.metric(t, "bridgehead_node_last_error", "stage", "catalog") == 1 })
	if got, _ := rig.routes.List(); len(got) != len(a1.Routes) {
		t.Errorf("a bad catalog changed the routes: %d", len(got))
	}
	// Fixed again.
	src.changed <- struct{}{}
	waitFor(t, "the recovery", func() bool { return rig.metric(t, "bridgehead_node_last_error", "stage", "catalog") == 0 })

	// Someone deletes a route: repaired, counted, timed.
	rig.routes.deleteOne()
	waitFor(t, "the repair", func() bool {
		return rig.metric(t, "bridgehead_node_route_repairs_total") == 1 && rig.metric(t, "bridgehead_node_route_repair_seconds") == 1
	})
	if got, _ := rig.routes.List(); len(got) != len(a1.Routes) {
		t.Errorf("after repair %d routes, want %d", len(got), len(a1.Routes))
	}
	if n := rig.metric(t, "bridgehead_node_route_changes_total", "op", "delete"); n != 0 {
		t.Errorf("%v routes deleted, want 0", n)
	}

	// The status followed: configured, the catalog error, configured
	// again; each change once (the repair changed nothing that shows).
	waitFor(t, "three statuses", func() bool { return len(rig.status()) >= 3 })
	sts := rig.status()
	catalogErr := []StageError{{Stage: "catalog", Err: "catalog.yaml:3: sites[0].name: is required (the node keeps its current routes and config)"}}
	want := []Status{
		{Configured: true, CNIWritten: true, Routes: len(a1.Routes)},
		{Configured: true, CNIWritten: true, Routes: len(a1.Routes), Errors: catalogErr},
		{Configured: true, CNIWritten: true, Routes: len(a1.Routes)},
	}
	if len(sts) != len(want) {
		t.Fatalf("statuses %+v, want %+v", sts, want)
	}
	for i := range want {
		if !sts[i].equal(want[i]) {
			t.Errorf("status %d: %+v, want %+v", i, sts[i], want[i])
		}
	}
	if !sts[0].OK() || sts[1].OK() {
		t.Errorf("OK: %v %v, want true false", sts[0].OK(), sts[1].OK())
	}
	if got, want := sts[1].String(), fmt.Sprintf("CNI config written; %d routes installed; catalog: catalog.yaml:3", len(a1.Routes)); !strings.HasPrefix(got, want) {
		t.Errorf("String() %q, want prefix %q", got, want)
	}
}

// TestAgentWaitsForModel: a node whose model does not load at start (no
// site or pod range yet, a bad catalog) is not a reason to stop. The
// agent reports why, touches nothing, and configures the node once the
// source's next change loads.
func TestAgentWaitsForModel(t *testing.T) {
	c := loadCatalog(t)
	a1, _ := FromConfig(c, "a1")
	rig := newRig(t)
	src := &fakeSource{
		models:  []*Desired{nil, a1},
		errs:    []error{errors.New(`Node "a1" has no label bridgehead.io/site`), nil},
		changed: make(chan struct{}, 1),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rig.agent.Run(ctx, src) }()
	defer cancel()
	waitFor(t, "the catalog error", func() bool { return rig.metric(t, "bridgehead_node_errors_total", "stage", "catalog") == 1 })
	select {
	case err := <-done:
		t.Fatalf("Run returned without a model: %v", err)
	case <-time.After(100 * time.Millisecond): // Run returns at once when it gives up
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if sts := rig.status(); len(sts) != 1 || sts[0].Configured || sts[0].OK() || len(sts[0].Errors) != 1 ||
		!strings.Contains(sts[0].Errors[0].Err, "the node waits") {
		t.Errorf("statuses %+v, want one: not configured, the catalog error, waiting", sts)
	}
	if got, _ := rig.routes.List(); len(got) != 0 {
		t.Errorf("routes installed without a model: %v", got)
	}
	src.changed <- struct{}{}
	waitFor(t, "the node configured", func() bool { return rig.metric(t, "bridgehead_node_cni_config_written") == 1 })
	if got, _ := rig.routes.List(); len(got) != len(a1.Routes) {
		t.Errorf("%d routes, want %d", len(got), len(a1.Routes))
	}
}

// TestAgentCNIChecks: the CNI stage refuses, saying why, a directory that
// holds another CNI's config (unless told to coexist) and plugins that do
// not support the config's cniVersion; it writes nothing then.
func TestAgentCNIChecks(t *testing.T) {
	c := loadCatalog(t)
	a1, _ := FromConfig(c, "a1")
	for _, tc := range []struct {
		name    string
		prepare func(r *agentRig)
		coexist bool
		wantErr string // "" : written
	}{
		{"clean", func(*agentRig) {}, false, ""},
		{"foreign config", func(r *agentRig) {
			os.WriteFile(filepath.Join(r.conf, "10-flannel.conflist"), []byte("{}"), 0o644)
		}, false, "another CNI's config is in "},
		{"foreign config, coexist", func(r *agentRig) {
			os.WriteFile(filepath.Join(r.conf, "10-flannel.conflist"), []byte("{}"), 0o644)
		}, true, ""},
		{"not a config", func(r *agentRig) {
			os.WriteFile(filepath.Join(r.conf, "README"), []byte("x"), 0o644)
		}, false, ""},
		{"old plugin", func(r *agentRig) {
			os.WriteFile(filepath.Join(r.bin, "bridge"), fakePlugin("0.3.0", "0.3.1"), 0o755)
		}, false, "bridge supports 0.3.0, 0.3.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(o *Options) { o.CNI.Coexist = tc.coexist })
			tc.prepare(r)
			src := &fakeSource{models: []*Desired{a1}, errs: []error{nil}, changed: make(chan struct{})}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.agent.Run(ctx, src) }()
			waitFor(t, "the first status", func() bool { return len(r.status()) > 0 })
			cancel()
			<-done
			st := r.status()[0]
			_, err := os.Stat(filepath.Join(r.conf, CNIConfName))
			if tc.wantErr == "" {
				if !st.CNIWritten || err != nil || len(st.Errors) > 0 {
					t.Errorf("status %+v, conflist %v: want written", st, err)
				}
				return
			}
			if st.CNIWritten || err == nil || len(st.Errors) != 1 || st.Errors[0].Stage != "cni" || !strings.Contains(st.Errors[0].Err, tc.wantErr) {
				t.Errorf("status %+v, conflist %v: want not written, the cni stage failing with %q", st, err, tc.wantErr)
			}
		})
	}
}
