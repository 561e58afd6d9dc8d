package promreg

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegisterStopsAtTheFirstError(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "a"})
	dup := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "a"})
	b := prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total", Help: "b"})
	if err := Register(reg, a, dup, b); err == nil {
		t.Fatal("registering a_total twice: no error")
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Errorf("%d series registered (err %v), want 1: a_total only", n, err)
	}
}

func TestAdoptTakesOverTheRegisteredCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	var err error
	first := Adopt(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "c"}), &err)
	first.Add(3)
	second := Adopt(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "c"}), &err)
	if err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(second); v != 3 {
		t.Errorf("the second registration counts %v, want the first's 3", v)
	}
	// Same name, other help: not the same description, so an error.
	Adopt(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "other"}), &err)
	if err == nil {
		t.Error("a conflicting collector: no error kept")
	}
}

func TestResultsExportsBothResultsFromZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec, err := Results(reg, "w_total", "Writes.")
	if err != nil {
		t.Fatal(err)
	}
	want := "# HELP w_total Writes.\n# TYPE w_total counter\nw_total{result=\"error\"} 0\nw_total{result=\"ok\"} 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "w_total"); err != nil {
		t.Error(err)
	}
	vec.WithLabelValues("ok").Inc()
	if v := testutil.ToFloat64(vec.WithLabelValues("ok")); v != 1 {
		t.Errorf("ok counts %v after one Inc, want 1", v)
	}
	if _, err := Results(reg, "w_total", "Writes."); err == nil {
		t.Error("registering w_total twice: no error")
	}
	if vec, err := Results(nil, "w_total", "Writes."); err != nil || vec == nil {
		t.Errorf("no registry: %v, %v; want a counter and no error", vec, err)
	}
}
