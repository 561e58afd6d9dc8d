package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/mesh"
)

// meshServer serves a gateway's /mesh.json with rows from site
// from to each of to, in state st.
func meshServer(t *testing.T, from, gw string, st mesh.State, to ...string) string {
	var rows []mesh.Row
	for _, s := range to {
		rows = append(rows, mesh.Row{FromSite: from, FromGateway: gw, To: s, State: st, Path: mesh.Direct, RTTMs: 1.25, MTU: 1420, Measured: time.Now()})
	}
	m := mesh.Merge(rows, nil, time.Now(), 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/mesh.json" || r.URL.Query().Get("local") != "1" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(m)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStatusMesh: status --mesh merges several gateways' endpoints
// into one matrix, as a table or JSON, and exits 1 when a pair is down
// or an endpoint cannot be read.
func TestStatusMesh(t *testing.T) {
	a := meshServer(t, "site-a", "gw-a1", mesh.Up, "site-b", "site-c")
	b := meshServer(t, "site-b", "gw-b1", mesh.Up, "site-a", "site-c")
	cDown := meshServer(t, "site-c", "gw-c1", mesh.Down, "site-a")
	strip := func(u string) string { return strings.TrimPrefix(u, "http://") }
	cases := []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"two gateways", []string{"--endpoint", a, "--endpoint", strip(b)}, 0,
			[]string{"3 sites, 4 pairs: 4 up, 0 degraded, 0 down, 0 connecting", "site-a         site-c         up         direct          1.25ms"}},
		{"a pair down", []string{"--endpoint", a, "--endpoint", cDown}, 1,
			[]string{"site-c         site-a         down       -"}},
		{"an endpoint away", []string{"--endpoint", a, "--endpoint", "127.0.0.1:1"}, 1,
			[]string{"! http://127.0.0.1:1/mesh.json?local=1: dial tcp 127.0.0.1:1: connect:\n  connection refused"}},
		{"json", []string{"--endpoint", a, "-o", "json"}, 0, []string{`"from": "site-a"`, `"to": "site-c"`, `"fromGateway": "gw-a1"`}},
		{"bad output", []string{"--endpoint", a, "-o", "yaml"}, 2, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, "", append([]string{"status", "--mesh"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, c.code, out, errOut)
			}
			for _, w := range c.wants {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "\033[") {
				t.Error("colours on a pipe without --color")
			}
		})
	}
	if _, out, _ := runCLI(t, "", "status", "--mesh", "--color", "--endpoint", a); !strings.Contains(out, "\033[32m") {
		t.Errorf("--color: no colours:\n%s", out)
	}
}

// TestPlugin: run as kubectl-bridgehead, the binary is kubectl's plugin:
// `kubectl bridgehead mesh` is status --mesh --kubernetes.
func TestPlugin(t *testing.T) {
	cases := []struct {
		argv    []string
		code    int
		out     string
		errLine string
	}{
		{[]string{"/usr/bin/kubectl-bridgehead"}, 2, "kubectl bridgehead mesh [-o table|json]", ""},
		{[]string{"kubectl-bridgehead", "help"}, 0, "kubectl bridgehead mesh", ""},
		{[]string{"kubectl-bridgehead", "nosuch"}, 2, "", `kubectl bridgehead: unknown command "nosuch"`},
		// mesh reads the Gateways through the kubeconfig: a missing one
		// is status --mesh --kubernetes's error.
		{[]string{"kubectl-bridgehead", "mesh", "--kubeconfig", "/nonexistent/kubeconfig"}, 1, "", "bridgehead status: kubeconfig: stat /nonexistent/kubeconfig"},
		{[]string{"/usr/bin/bridgehead", "version"}, 0, "", ""},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := dispatch(c.argv, strings.NewReader(""), &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errb.String(), c.errLine) {
			t.Errorf("%v: exit %d\n%s%s", c.argv, code, out.String(), errb.String())
		}
	}
}
