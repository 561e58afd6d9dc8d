package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
)

func TestParseState(t *testing.T) {
	cur := HostState{Schema: StateSchema, Agent: "v2", Node: "a1", Model: "ab",
		Owned: Owned{RouteProtocol: 66, NFTables: []string{"inet bridgehead-node"}, CNIConfig: "/etc/cni/net.d/05-bridgehead.conflist"}}
	curJSON, _ := json.Marshal(cur)
	tests := []struct {
		name  string
		in    string
		want  HostState
		err   string
		newer bool
	}{
		{"this schema", string(curJSON), cur, "", false},
		{"schema 1 written by hand", `{"schema": 1}`, HostState{Schema: 1}, "", false},
		{"a newer agent's: only its schema and agent read", `{"schema": 3, "agent": "v9", "owned": ["something else"]}`,
			HostState{Schema: 3, Agent: "v9"}, "node state written by a newer agent (schema 3, agent \"v9\"; this agent knows schema 2)", true},
		{"no schema", `{"agent": "v2"}`, HostState{}, "not an agent's state: no schema", false},
		{"schema zero", `{"schema": 0}`, HostState{}, "not an agent's state: no schema", false},
		{"not JSON", `schema: 2`, HostState{}, "not an agent's state: invalid character", false},
		{"a field of the wrong type", `{"schema": 2, "owned": {"routeProtocol": "66"}}`, HostState{}, "schema 2: json: cannot unmarshal", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseState([]byte(tt.in))
			if (err == nil) != (tt.err == "") || (err != nil && !strings.HasPrefix(err.Error(), tt.err)) {
				t.Fatalf("err %v, want %q", err, tt.err)
			}
			if errors.Is(err, errNewerState) != tt.newer {
				t.Errorf("newer %v, want %v", errors.Is(err, errNewerState), tt.newer)
			}
			if g, _ := json.Marshal(got); string(g) != string(mustJSON(tt.want)) {
				t.Errorf("got %s, want %s", g, mustJSON(tt.want))
			}
		})
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// FuzzParseState: ParseState never panics; what it accepts has a
// schema, and one it knows survives a write and a parse unchanged.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"schema": 2, "agent": "v", "node": "n", "owned": {"routeProtocol": 66, "nftTables": ["inet x"], "cniConfig": "/c"}, "model": "m"}`))
	f.Add([]byte(`{"schema": 3}`))
	f.Add([]byte(`{"schema": -1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseState(b)
		if err != nil && !errors.Is(err, errNewerState) {
			return
		}
		if st.Schema < 1 {
			t.Fatalf("accepted %q with schema %d", b, st.Schema)
		}
		if err != nil {
			return
		}
		again, err := ParseState(mustJSON(st))
		if err != nil || string(mustJSON(again)) != string(mustJSON(st)) {
			t.Fatalf("round trip of %q: %+v, %v", b, again, err)
		}
	})
}

// TestAgentAdoptsState: the agent reads the host state before it
// touches the node. With no file (an agent before versioned state) or
// an older schema it adopts the node, changes only what differs, says
// so, and writes its own schema; with a newer agent's file it changes
// nothing (no route, CNI config, SNAT or state write) and reports stage
// "state" until the file is gone.
func TestAgentAdoptsState(t *testing.T) {
	c := loadCatalog(t)
	a1, _ := FromConfig(c, "a1")
	tests := []struct {
		name    string
		fixture string // the state file before the agent starts ("": none)
		adopt   bool
		log     string
	}{
		{"no file: schema 1", "", true, "from_schema=1"},
		{"this schema, another version", `{"schema": 2, "agent": "v1.0.0", "node": "a1"}`, true, "from_agent=v1.0.0"},
		{"a newer agent's", `{"schema": 3, "agent": "v3.0.0"}`, false, "node state written by a newer agent (schema 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			state := filepath.Join(t.TempDir(), "node-state.json")
			if tt.fixture != "" {
				os.WriteFile(state, []byte(tt.fixture), 0o644)
			}
			rig := newRig(t, func(o *Options) {
				o.StateFile, o.Version = state, "v2.0.0"
				o.Log = slog.New(slog.NewTextHandler(&logs, nil))
			})
			// What the previous agent left: every route of the model.
			rig.routes.Set(a1.Routes)
			src := &fakeSource{models: []*Desired{a1}, errs: []error{nil}, changed: make(chan struct{}, 1)}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- rig.agent.Run(ctx, src) }()
			defer func() { cancel(); <-done }()
			if tt.adopt {
				waitFor(t, "the state written", func() bool {
					st, err := readState(state, rig.conf)
					return err == nil && st.Agent == "v2.0.0"
				})
				for _, op := range []string{"add", "replace", "delete"} {
					if n := rig.metric(t, "bridgehead_node_route_changes_total", "op", op); n != 0 {
						t.Errorf("route changes %s = %v, want 0: the routes were the model's", op, n)
					}
				}
				st, err := readState(state, rig.conf)
				if err != nil || st.Schema != StateSchema || st.Agent != "v2.0.0" || st.Node != "a1" || st.Model != modelFingerprint(a1) {
					t.Errorf("state after adoption: %+v %v", st, err)
				}
				if !strings.Contains(logs.String(), "adopted the node") || !strings.Contains(logs.String(), tt.log) {
					t.Errorf("no adoption line with %q:\n%s", tt.log, logs.String())
				}
				return
			}
			waitFor(t, "the state stage failing", func() bool { return rig.metric(t, "bridgehead_node_last_error", "stage", "state") == 1 })
			if b, _ := os.ReadFile(state); string(b) != tt.fixture {
				t.Errorf("a newer agent's state file rewritten: %s", b)
			}
			if _, err := os.Stat(filepath.Join(rig.conf, CNIConfName)); err == nil {
				t.Error("CNI config written under a newer agent's state")
			}
			if n := rig.metric(t, "bridgehead_node_syncs_total", "trigger", "start"); n > 0 {
				t.Errorf("%v syncs under a newer agent's state, want none", n)
			}
			if !strings.Contains(logs.String(), tt.log) {
				t.Errorf("log lacks %q:\n%s", tt.log, logs.String())
			}
			// The operator removes the file: the agent takes over at
			// its next look.
			os.Remove(state)
			src.changed <- struct{}{}
			waitFor(t, "the take-over", func() bool { return rig.metric(t, "bridgehead_node_last_error", "stage", "state") == 0 })
			waitFor(t, "the state written", func() bool { st, err := readState(state, rig.conf); return err == nil && st.Schema == StateSchema })
		})
	}
}
