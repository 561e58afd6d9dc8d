package verify

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestBuildMatrix(t *testing.T) {
	now := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	recs := []Record{
		{Site: "b", Node: "b1", On: "pod", Time: now.Add(-2 * time.Hour), Checks: []Check{
			{Name: "pod", Target: "a/10.244.1.10 via gateways", Result: Pass},
			{Name: "dns", Target: "kubernetes.default.svc.cluster.local @10.96.0.10:53", Result: Pass},
		}},
		{Site: "a", Node: "a2", On: "node", Time: now.Add(-30 * time.Second), Checks: []Check{
			{Name: "pod", Target: "b/10.245.1.10 via gateways", Result: Pass},
			{Name: "pod", Target: "a/10.244.2.10 direct", Result: Fail, Detail: "no answer in 2s"},
			{Name: "callback", Target: "10.224.0.4:8131 -> 10.224.0.12:10250", Result: Skip, Detail: "no relay: pass --callback-relay"},
		}},
		{Site: "a", Node: "a1", On: "pod", Time: now.Add(-10 * time.Second), Checks: []Check{
			{Name: "pod", Target: "b/10.245.1.10 via gateways", Result: Pass},
			{Name: "callback", Target: "10.224.0.4:8131 -> 10.224.0.11:10250", Result: Pass},
		}},
	}
	m := BuildMatrix(recs, MatrixOptions{Sites: []string{"a", "b", "c"}, MaxAge: time.Hour, Now: now})
	if got, want := strings.Join(m.Checks, ","), "pod,callback,dns"; got != want {
		t.Errorf("checks %s, want %s", got, want)
	}
	var order []string
	for _, r := range m.Rows {
		order = append(order, r.Site+"/"+r.Node)
	}
	if got, want := strings.Join(order, " "), "a/a1 a/a2 b/b1 c/"; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	if m.Failing != 1 || m.Stale != 1 || m.Missing != 1 || m.OK() {
		t.Errorf("failing %d stale %d missing %d OK %v, want 1 1 1 false", m.Failing, m.Stale, m.Missing, m.OK())
	}
	a2 := m.Rows[1].Cells
	if c := a2["pod"]; c.Result != Fail || c.Targets != 2 || c.Reason != "a/10.244.2.10 direct: no answer in 2s" {
		t.Errorf("a2 pod cell %+v", c)
	}
	if c := a2["callback"]; c.Result != Skip || !strings.Contains(c.Reason, "no relay") {
		t.Errorf("a2 callback cell %+v", c)
	}
	var out bytes.Buffer
	m.WriteTable(&out)
	want := `SITE  NODE  ON    AGE             POD   CALLBACK  DNS
a     a1    pod   10s             PASS  PASS      -
a     a2    node  30s             FAIL  SKIP      -
b     b1    pod   2h0m0s (stale)  PASS  -         PASS
c     -     -     no report       -     -         -

  a/a2 pod FAIL: a/10.244.2.10 direct: no answer in 2s
  a/a2 callback SKIP: 10.224.0.4:8131 -> 10.224.0.12:10250: no relay: pass --callback-relay

3 reports: 1 failing, 1 stale; sites without a report: 1
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := m.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var back Matrix
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || len(back.Rows) != 4 || !back.Rows[3].NoReport || !back.Rows[2].Stale {
		t.Errorf("JSON round trip: %v %+v", err, back)
	}
}

func TestParseRecord(t *testing.T) {
	tests := []struct {
		in, err string
	}{
		{`{"site":"a","node":"a1","on":"pod","time":"2026-12-02T01:00:00Z","checks":[{"check":"pod","target":"x","result":"PASS","figure":""}]}`, ""},
		{`{"node":"a1","time":"2026-12-02T01:00:00Z"}`, "site: is required"},
		{`{"site":"a","time":"2026-12-02T01:00:00Z"}`, "node: is required"},
		{`{"site":"a","node":"a1"}`, "time: is required"},
		{`{"site":"a","node":"a1","time":"2026-12-02T01:00:00Z","checks":[{"result":"PASS"}]}`, "checks[0].check: is required"},
		{`{"site":"a","node":"a1","time":"2026-12-02T01:00:00Z","checks":[{"check":"dns","result":"OK"}]}`, `checks[0].result: "OK" is not PASS, FAIL or SKIP`},
		{`{"site":`, "report: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		_, err := ParseRecord([]byte(tt.in))
		if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseRecord(%s) = %v, want %q", tt.in, err, tt.err)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"site":"a","node":"a1","on":"pod","time":"2026-12-02T01:00:00Z","checks":[{"check":"pod","target":"x","result":"FAIL","detail":"d"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRecord(data)
		if err != nil {
			return
		}
		// A parsed record builds a matrix and prints.
		m := BuildMatrix([]Record{r}, MatrixOptions{Sites: []string{r.Site, "other"}, MaxAge: time.Hour, Now: r.Time})
		if len(m.Rows) != 2 && !(r.Site == "other" && len(m.Rows) == 1) {
			t.Fatalf("rows %+v", m.Rows)
		}
		var b bytes.Buffer
		m.WriteTable(&b)
		if err := m.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
	})
}
