package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/mesh"
)

// TestMesh: on the two-site lab, gateway A's mesh view (/mesh.json, the
// terminal table of `bridgehead status --mesh`, and the /mesh page as a
// headless chromium renders it, its script having fetched mesh.json)
// agrees with what the gateway measures (/metrics) and with verify; when
// nftables on A drops A's datagrams to B, the cell turns red within two
// probe intervals (every answer generated later shows red), and green
// again once the rule is gone. Screenshots of both go to the artifacts
// directory ($BRIDGEHEAD_ARTIFACTS, else a temporary one; the log names
// it).
func TestMesh(t *testing.T) {
	requireRoot(t)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is needed for the page's test (make deps installs it)")
	}
	binaries(t) // built once per test binary: not this test's time
	start := time.Now()
	l := startLab(t)
	t.Logf("lab up in %v", time.Since(start).Round(time.Millisecond))
	art := os.Getenv("BRIDGEHEAD_ARTIFACTS")
	if art == "" {
		art = t.TempDir()
	}
	art = filepath.Join(art, "TestMesh")
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}

	// Traffic from node A to node B keeps the path active, so A probes
	// B every interval (200 ms), not every idle interval.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var conn net.Conn
	if err := inNetns(l.ns("a-node"), func() (err error) {
		conn, err = net.Dial("udp", nodeB+":9")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				conn.Write([]byte("mesh"))
			}
		}
	}()
	fetch, cellAB, waitCell := meshOf(t, l)
	// browse renders the page in chromium in A's namespace: its DOM
	// once the script has fetched mesh.json, and a screenshot.
	browse := func(name string) string {
		t.Helper()
		shot := filepath.Join(art, name+".png")
		began := time.Now()
		c := exec.Command("ip", "netns", "exec", l.ns("a-gw"), chromium, "--headless", "--no-sandbox", "--disable-gpu",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=3000", "--window-size=900,420",
			"--screenshot="+shot, "--dump-dom", "http://127.0.0.1:9641/mesh")
		var stderr strings.Builder
		c.Stderr = &stderr
		dom, err := c.Output()
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, stderr.String())
		}
		if st, err := os.Stat(shot); err != nil || st.Size() < 1000 {
			t.Fatalf("no screenshot at %s: %v\n%s", shot, err, stderr.String())
		}
		t.Logf("page %s: screenshot %s (chromium %v)", name, shot, time.Since(began).Round(time.Millisecond))
		return string(dom)
	}
	statusMesh := func() (string, error) {
		return l.exec("a-gw", filepath.Join(l.bin, "bridgehead"), "status", "--mesh", "--endpoint", "127.0.0.1:9641")
	}

	// Healthy: up, direct, a round trip measured; while the path MTU
	// check runs (some 10 s after the session), the page and verify.
	_, took := waitCell("up with an RTT", func(c mesh.Cell) bool { return c.State == mesh.Up && c.RTTMs > 0 }, 15*time.Second)
	t.Logf("cell up after %v", took.Round(time.Millisecond))
	// chromium's start takes both cores for a second or two: on a
	// loaded machine the router may take B down meanwhile (its log
	// says so), and the page rightly shows it red. Then look again.
	dom := browse("mesh-up")
	for try := 1; try < 3 && !strings.Contains(dom, cellAttrs("up")); try++ {
		t.Logf("page shows site-a → site-b %s, the router's view then (see gateway A's log); loading it again", domState(dom))
		dom = browse("mesh-up")
	}
	checkDOM(t, dom, "up")
	// verify's node checks fail here (no kubelet in this lab): only
	// the lines about gateway B count.
	v, _ := l.verify()
	up, took := waitCell("up with the path MTU", func(c mesh.Cell) bool { return c.State == mesh.Up && c.MTU > 0 }, 15*time.Second)
	if !strings.HasPrefix(verifyLine(v, "remote-gateway"), "PASS") || !strings.Contains(verifyLine(v, "path-mtu"), fmt.Sprintf("%d bytes", up.MTU)) {
		t.Errorf("verify disagrees with the up cell (MTU %d):\n%s", up.MTU, v)
	}
	t.Logf("path MTU in the cell %v later: %+v", took.Round(time.Millisecond), up)
	link := up.Rows[0].Links[0]
	if up.Path != mesh.Direct || up.MTU != 1420 || up.Rows[0].FromGateway != "gw-a1" || link.Gateway != "gw-b1" || link.IntervalMs != 200 {
		t.Errorf("healthy cell: %+v", up)
	}
	scrape := l.metrics("a")
	peer := `{gateway="gw-b1",site="site-b"}`
	if metric(scrape, "bridgehead_peer_up"+peer) != 1 || metric(scrape, "bridgehead_peer_path_mtu_bytes"+peer) != float64(up.MTU) ||
		metric(scrape, `bridgehead_peer_path{gateway="gw-b1",path="direct",site="site-b"}`) != 1 ||
		metric(scrape, `bridgehead_mesh_site_state{local_gateway="gw-a1",local_site="site-a",site="site-b"}`) != 1 {
		t.Errorf("the cell says up, direct, MTU %d; the gateway's metrics:\n%s", up.MTU, strings.Join(stateSeries.FindAllString(scrape, -1), "\n"))
	}
	if rtt := metric(scrape, "bridgehead_peer_probe_rtt_seconds"+peer) * 1000; rtt <= 0 || rtt > 50 || up.RTTMs > 50 {
		t.Errorf("RTT: cell %.3f ms (median), gateway %.3f ms (newest probe)", up.RTTMs, rtt)
	}
	out, err := statusMesh()
	if err != nil {
		t.Fatalf("status --mesh on the healthy lab: %v\n%s", err, out)
	}
	line := tableLine(out, "site-a", "site-b")
	if f := strings.Fields(line); len(f) < 8 || f[2] != "up" || f[3] != "direct" || f[6] != "1420" {
		t.Errorf("table line %q disagrees with the JSON %+v:\n%s", line, up, out)
	}

	// Break: A's datagrams to B dropped.
	nft := func(rules string) {
		t.Helper()
		c := exec.Command("ip", "netns", "exec", l.ns("a-gw"), "nft", "-f", "-")
		c.Stdin = strings.NewReader(rules)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v\n%s", err, out)
		}
	}
	nft("table inet bh_mesh {\n chain out {\n  type filter hook output priority 0;\n  ip daddr 203.0.113.2 udp dport 51820 drop\n }\n}\n")
	broke := time.Now()
	twoIntervals := 2 * time.Duration(link.IntervalMs) * time.Millisecond
	var firstRed, lastGreen time.Duration = -1, -1
	for time.Since(broke) < twoIntervals+time.Second {
		m := fetch()
		at := m.Generated.Sub(broke)
		if c := cellAB(m); c.State == mesh.Down {
			if firstRed < 0 {
				firstRed = at
			}
		} else {
			lastGreen = at
			if firstRed >= 0 {
				t.Errorf("cell back to %s at %v after turning red at %v", c.State, at, firstRed)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("link cut: last answer not red %v after the cut, first red %v (two probe intervals: %v)", lastGreen, firstRed, twoIntervals)
	// A reply in flight at the cut may still arrive: a round trip of slack.
	if firstRed < 0 || lastGreen > twoIntervals+10*time.Millisecond {
		t.Errorf("not red within two probe intervals of the cut: last not red at %v, first red at %v", lastGreen, firstRed)
	}
	down := cellAB(fetch())
	out, err = statusMesh()
	if err == nil || !strings.Contains(tableLine(out, "site-a", "site-b"), " down ") {
		t.Errorf("status --mesh with the link cut (err %v):\n%s", err, out)
	}
	if v, _ := l.verify(); !strings.HasPrefix(verifyLine(v, "remote-gateway"), "FAIL") {
		t.Errorf("verify passes while the mesh says %s:\n%s", down.State, v)
	}
	checkDOM(t, browse("mesh-down"), "down")

	// Restore: green again once the router has B up (after its
	// damping's answers in a row).
	nft("delete table inet bh_mesh\n")
	_, took = waitCell("up again", func(c mesh.Cell) bool { return c.State == mesh.Up }, 15*time.Second)
	t.Logf("link restored: cell up again after %v", took.Round(time.Millisecond))
	t.Logf("TestMesh took %v; artifacts in %s", time.Since(start).Round(time.Millisecond), art)
}

// meshOf returns functions that read gateway A's /mesh.json from
// inside its namespace: the matrix, its cell site-a → site-b, and a wait
// for that cell to satisfy ok.
func meshOf(t *testing.T, l *lab) (fetch func() mesh.Matrix, cellAB func(mesh.Matrix) mesh.Cell,
	waitCell func(what string, ok func(mesh.Cell) bool, within time.Duration) (mesh.Cell, time.Duration)) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = inNetns(l.ns("a-gw"), func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		DisableKeepAlives: true,
	}}
	fetch = func() mesh.Matrix {
		t.Helper()
		res, err := client.Get("http://127.0.0.1:9641/mesh.json")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m mesh.Matrix
		if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	cellAB = func(m mesh.Matrix) mesh.Cell {
		t.Helper()
		c, ok := m.Cell("site-a", "site-b")
		if !ok {
			t.Fatalf("no cell site-a → site-b in %+v", m)
		}
		return c
	}
	waitCell = func(what string, ok func(mesh.Cell) bool, within time.Duration) (mesh.Cell, time.Duration) {
		t.Helper()
		begin := time.Now()
		for {
			c := cellAB(fetch())
			if ok(c) {
				return c, time.Since(begin)
			}
			if time.Since(begin) > within {
				t.Fatalf("site-a → site-b not %s after %v: %+v", what, within, c)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return fetch, cellAB, waitCell
}

// TestMeshStandby: on the HA lab (site B has gw-b1 and gw-b2), when
// gw-b2's WAN link goes down the cell site-a → site-b turns degraded,
// path standby gw-b1, with gw-b2's link red in the JSON and the table
// saying the same; it is up again once gw-b2 is back.
func TestMeshStandby(t *testing.T) {
	requireRoot(t)
	binaries(t)
	start := time.Now()
	l := startHALab(t)
	_, _, waitCell := meshOf(t, l)
	up, took := waitCell("up through both gateways", func(c mesh.Cell) bool {
		return c.State == mesh.Up && len(c.Rows) == 1 && c.Rows[0].GatewaysUp == 2
	}, 15*time.Second)
	t.Logf("lab up in %v, cell up (2 gateways) after %v more", time.Since(start).Round(time.Millisecond)-took, took.Round(time.Millisecond))
	if up.Path != mesh.Direct {
		t.Errorf("both up: path %q", mesh.PathText(up.Path, up.Via))
	}
	l.fail("gw-b2", "blackhole")
	deg, took := waitCell("degraded", func(c mesh.Cell) bool { return c.State == mesh.Degraded }, 10*time.Second)
	t.Logf("gw-b2 cut off: cell degraded after %v: %s", took.Round(time.Millisecond), mesh.PathText(deg.Path, deg.Via))
	if mesh.PathText(deg.Path, deg.Via) != "standby gw-b1" || deg.Rows[0].GatewaysUp != 1 {
		t.Errorf("degraded cell: %+v", deg)
	}
	for _, lk := range deg.Rows[0].Links {
		if red := lk.Gateway == "gw-b2"; lk.State.Red() != red {
			t.Errorf("link %s: %s", lk.Gateway, lk.State)
		}
	}
	out, err := l.exec("a-gw", filepath.Join(l.bin, "bridgehead"), "status", "--mesh", "--endpoint", "127.0.0.1:9641")
	if f := strings.Fields(tableLine(out, "site-a", "site-b")); err != nil || len(f) < 5 || f[2] != "degraded" || f[3] != "standby" || f[4] != "gw-b1" {
		t.Errorf("status --mesh with gw-b2 cut off (err %v):\n%s", err, out)
	}
	l.restore("gw-b2", "blackhole")
	_, took = waitCell("up again", func(c mesh.Cell) bool { return c.State == mesh.Up }, 15*time.Second)
	t.Logf("gw-b2 back: cell up after %v; TestMeshStandby took %v", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// tableLine is the line from → to of status --mesh's output.
func tableLine(out, from, to string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == from && f[1] == to {
			return l
		}
	}
	return ""
}

// checkDOM checks the page as chromium rendered it: the script ran
// (data-live, set once it has drawn mesh.json), the cell site-a →
// site-b has the state, the legend and the summary are there.
func checkDOM(t *testing.T, dom, state string) {
	t.Helper()
	for _, want := range []string{
		`data-live="1"`,
		cellAttrs(state),
		`data-from="site-a" data-to="site-a" data-state="self"`,
		`id="legend"`,
		"2 sites, 1 pairs: ",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page as chromium renders it lacks %q:\n%s", want, headOf(dom, 3000))
		}
	}
}

// cellAttrs are the attributes of the page's cell site-a → site-b in state.
func cellAttrs(state string) string {
	return fmt.Sprintf(`data-from="site-a" data-to="site-b" data-state="%s"`, state)
}

// domState is the state of the page's cell site-a → site-b.
func domState(dom string) string {
	_, rest, ok := strings.Cut(dom, `data-from="site-a" data-to="site-b" data-state="`)
	if !ok {
		return "(no cell)"
	}
	st, _, _ := strings.Cut(rest, `"`)
	return st
}

func headOf(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
