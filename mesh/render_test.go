package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func row(from, gw, to string, st State, path Path, via ...string) Row {
	r := Row{FromSite: from, FromGateway: gw, To: to, State: st, Path: path, Via: via,
		Gateways: 2, RTTMs: 1.5, MTU: 1420, Measured: t0}
	if st == Up {
		r.GatewaysUp = 2
	}
	return r
}

// TestMerge: a site pair's cell from the rows of the site's gateways.
func TestMerge(t *testing.T) {
	cases := []struct {
		name  string
		rows  []Row
		state State
		path  string
	}{
		{"both up", []Row{row("a", "gw-a1", "b", Up, Direct), row("a", "gw-a2", "b", Up, Direct)}, Up, "direct"},
		{"one cut off", []Row{row("a", "gw-a1", "b", Up, Direct), row("a", "gw-a2", "b", Down, None)}, Degraded, "direct"},
		{"both down", []Row{row("a", "gw-a1", "b", Down, None), row("a", "gw-a2", "b", Down, None)}, Down, "-"},
		{"down and connecting", []Row{row("a", "gw-a1", "b", Down, None), row("a", "gw-a2", "b", Connecting, None)}, Down, "-"},
		{"connecting", []Row{row("a", "gw-a1", "b", Connecting, None)}, Connecting, "-"},
		{"standby", []Row{row("a", "gw-a1", "b", Degraded, Standby, "gw-b2"), row("a", "gw-a2", "b", Up, Direct)}, Degraded, "standby gw-b2"},
		{"hub wins", []Row{row("a", "gw-a1", "b", Up, Hub, "c"), row("a", "gw-a2", "b", Degraded, Standby, "gw-b2")}, Degraded, "hub c"},
		{"first row of a gateway wins", []Row{row("a", "gw-a1", "b", Up, Direct), row("a", "gw-a1", "b", Down, None)}, Up, "direct"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := Merge(c.rows, nil, t0.Add(2*time.Second), 0)
			cell, ok := m.Cell("a", "b")
			if !ok {
				t.Fatal("no cell a → b")
			}
			if cell.State != c.state || PathText(cell.Path, cell.Via) != c.path {
				t.Errorf("cell %s %q, want %s %q", cell.State, PathText(cell.Path, cell.Via), c.state, c.path)
			}
			if cell.AgeSeconds != 2 {
				t.Errorf("age %v, want 2", cell.AgeSeconds)
			}
			if len(m.Sites) != 2 || m.RefreshMs != 1000 {
				t.Errorf("sites %v refresh %d", m.Sites, m.RefreshMs)
			}
		})
	}
}

// bigMesh is n sites with gws gateways each, every pair up but the
// pairs toward site 7, which are down.
func bigMesh(n, gws int, name func(int) string) Matrix {
	var rows []Row
	for i := range n {
		for g := 1; g <= gws; g++ {
			for j := range n {
				if i == j {
					continue
				}
				st, p := Up, Direct
				if j == 7 {
					st, p = Down, None
				}
				rows = append(rows, row(name(i), fmt.Sprintf("gw-%d", g), name(j), st, p))
			}
		}
	}
	return Merge(rows, nil, t0, 0)
}

// TestTableFits: every line of the table fits the terminal's width,
// with long names, in a small and a 200-site mesh, with and without
// colours; names that differ only at the end stay apart.
func TestTableFits(t *testing.T) {
	long := func(i int) string { return fmt.Sprintf("westeurope-production-cluster-%03d", i) }
	short := func(i int) string { return fmt.Sprintf("s%d", i) }
	cases := []struct {
		name      string
		m         Matrix
		width     int
		all       bool
		lines     int // at most
		grid      bool
		wantShown string
	}{
		{"2 sites", bigMesh(8, 3, short), 80, false, 70, true, "s0"},
		{"long names", bigMesh(9, 3, long), 80, false, 100, true, "westeu…ter-008"},
		{"200 sites: only pairs not up", bigMesh(200, 1, long), 80, false, 210, false, "westeu…ter-007"},
		{"200 sites, all", bigMesh(200, 1, short), 80, true, 40000, false, "s199"},
		{"narrowest", bigMesh(9, 3, long), 64, false, 100, true, "we…008"},
	}
	for _, c := range cases {
		for _, color := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/color=%v", c.name, color), func(t *testing.T) {
				var b bytes.Buffer
				if err := WriteTable(&b, c.m, TableOptions{Width: c.width, Color: color, All: c.all}); err != nil {
					t.Fatal(err)
				}
				out := b.String()
				lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				for i, l := range lines {
					if w := utf8.RuneCountInString(stripANSI(l)); w > c.width {
						t.Fatalf("line %d is %d columns, more than %d:\n%s", i, w, c.width, l)
					}
				}
				if len(lines) > c.lines {
					t.Errorf("%d lines, want at most %d", len(lines), c.lines)
				}
				if strings.Contains(out, "from\\to") != c.grid {
					t.Errorf("grid shown: %v, want %v", !c.grid, c.grid)
				}
				if !strings.Contains(out, c.wantShown) {
					t.Errorf("%q not in the table:\n%s", c.wantShown, head(out))
				}
				if strings.Contains(out, "\033[") != color {
					t.Errorf("colours: %v, want %v", !color, color)
				}
			})
		}
	}
}

func head(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 033 {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TestTableText: what the table says of a small mesh.
func TestTableText(t *testing.T) {
	rows := []Row{
		row("site-a", "gw-a1", "site-b", Up, Direct),
		row("site-b", "gw-b1", "site-a", Degraded, Standby, "gw-a2"),
	}
	rows[1].Loss = 0.25
	var b bytes.Buffer
	if err := WriteTable(&b, Merge(rows, []Source{{Name: "http://10.0.0.9:9641", Error: "connection refused"}}, t0.Add(3*time.Second), 0), TableOptions{}); err != nil {
		t.Fatal(err)
	}
	want := `2 sites, 2 pairs: 1 up, 1 degraded, 0 down, 0 connecting
! http://10.0.0.9:9641: connection refused
     from\to 01
0 site-a     ·●
1 site-b     ◐·
             ● up ◐ degraded ✕ down ? connecting
FROM           TO             STATE      PATH               RTT  LOSS   MTU  AGE
site-a         site-b         up         direct          1.50ms    0%  1420   3s
site-b         site-a         degraded   standby gw-a2   1.50ms   25%  1420   3s
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestPage: the page is the heat-map of the matrix, escapes every name,
// and loads nothing from elsewhere.
func TestPage(t *testing.T) {
	evil := `<script>alert("x")</script>`
	rows := []Row{
		row("site-a", "gw-a1", evil, Down, None),
		row("site-a", "gw-a1", "site-b", Up, Direct),
	}
	var b bytes.Buffer
	if err := WritePage(&b, Merge(rows, []Source{{Name: "<b>src</b>", Error: "<i>bad</i>"}}, t0, 500*time.Millisecond), "gw-a1 <x>"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{evil, "<b>src</b>", "<i>bad</i>", "<x>", "src=", "href=", "@import", "http://", "https://"} {
		if strings.Contains(out, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	for _, want := range []string{
		`data-from="site-a" data-to="site-b" data-state="up"`,
		`data-from="site-a" data-to="&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" data-state="down"`,
		`data-from="site-b" data-to="site-b" data-state="self"`,
		`data-from="site-b" data-to="site-a" data-state="none"`,
		`var refresh =  500 ;`,
		`fetch("mesh.json"`,
		"3 sites, 2 pairs: 1 up, 0 degraded, 1 down, 0 connecting",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestJSON: the matrix's JSON is what the page's script reads.
func TestJSON(t *testing.T) {
	m := Merge([]Row{row("a", "gw-a1", "b", Up, Direct)}, nil, t0, 0)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Sites []string `json:"sites"`
		Cells []struct {
			From, To, State, Path string
			RTTMs                 float64 `json:"rttMs"`
			Rows                  []struct {
				FromGateway string `json:"fromGateway"`
			}
		} `json:"cells"`
		RefreshMs int `json:"refreshMs"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Cells) != 1 || back.Cells[0].State != "up" || back.Cells[0].Path != "direct" || back.Cells[0].RTTMs != 1.5 ||
		back.Cells[0].Rows[0].FromGateway != "gw-a1" || back.RefreshMs != 1000 {
		t.Errorf("JSON %s", b)
	}
}
