package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/bridgehead/bridgehead/packet"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/router/fq"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ipv4UDP(src, dst netip.Addr, payload []byte) []byte {
	b := make([]byte, 28+len(payload))
	b[0] = 0x45
	total := len(b)
	b[2], b[3] = byte(total>>8), byte(total)
	b[8] = 64
	b[9] = 17
	copy(b[12:16], src.AsSlice())
	copy(b[16:20], dst.AsSlice())
	c := packet.Checksum(b[:20], 0)
	b[10], b[11] = byte(c>>8), byte(c)
	b[20], b[21], b[22], b[23] = 0x9c, 0x40, 0x1b, 0x58
	ul := 8 + len(payload)
	b[24], b[25] = byte(ul>>8), byte(ul)
	copy(b[28:], payload)
	return b
}

// TestReloadKeepsSessions: 1000 reloads that alternate between adding and
// removing a third site, while packets flow between a and b. No packet is
// lost, the a-b session is never renegotiated, and the kernel routes follow
// each config. Run under -race; goleak checks goroutines at the end.
func TestReloadKeepsSessions(t *testing.T) {
	l := newLabAB(t)
	dir, keys, sa, sb, pathA := l.dir, l.keys, l.a, l.b, l.path
	sc := keys.siteYAML("c", "10.3.0.0/24", "10.103.0.0/16", "127.0.0.1:51003")
	pathB := keys.write(t, dir, "b", sa, sb)
	bindA, bindB := udp.NewPair(epA, epB)
	ga, tunA, kernA := startGateway(t, pathA, bindA)
	gb, tunB, _ := startGateway(t, pathB, bindB)

	podA, podB := netip.MustParseAddr("10.101.0.5"), netip.MustParseAddr("10.102.0.5")
	// The fair queue drops a packet that waited longer than its time
	// bound (fq.DefaultMaxDelay, 100 ms) for the sealer: on this shared
	// 2-core machine under -race the thread running the sealer is
	// sometimes off its CPU that long. That is the queue doing its job,
	// not the reload losing a packet, so such a packet is sent again at
	// once, counted, and bounded below, and each drop must coincide with
	// the process short of CPU (watchSched, checked at the end); any
	// other loss fails the test. Evidence that these drops are CPU
	// starvation only: run as root under chrt -f 10 (no other process
	// can take the CPU from its threads) it saw none in 2 runs, against
	// 4 and 6 in the 2 runs between them (load 8-12).
	expired := func() uint64 { return ga.r.Drops().Get(router.Inside, router.ReasonFQExpired) }
	var resent int
	// send reports what went wrong; it runs on the traffic goroutine,
	// which must not call t.Fatal.
	send := func(i int) error {
		pkt := ipv4UDP(podA, podB, []byte(fmt.Sprintf("packet %d", i)))
		for {
			before := expired()
			if err := tunA.Inject(pkt); err != nil {
				return err
			}
			if arrived, err := awaitPacket(tunB, pkt, i, func() bool { return expired() > before }); arrived || err != nil {
				return err
			}
			if expired() > before && resent < maxExpired {
				resent++
				continue
			}
			return fmt.Errorf("packet %d lost; drops at A %v, at B %v", i, nonZeroDrops(ga.r), nonZeroDrops(gb.r))
		}
	}
	if err := send(0); err != nil {
		t.Fatal(err)
	}
	// Both gateways set sessions up on their own as well (proactive
	// handshakes): count from when they are done.
	hs := settledHandshakes(t, ga.r)

	watch := watchSched(5*time.Millisecond, expired)
	t.Cleanup(watch.halt)
	stop := make(chan struct{})
	traffic := make(chan int, 1)
	failed := make(chan error, 1)
	go func() {
		n := 1
		for {
			select {
			case <-stop:
				traffic <- n
				return
			default:
			}
			if err := send(n); err != nil {
				failed <- err
				return
			}
			n++
		}
	}()
	for i := range 1000 {
		select {
		case err := <-failed:
			t.Fatalf("during reload %d: %v", i, err)
		default:
		}
		if i%2 == 0 {
			keys.write(t, dir, "a", sa, sb, sc)
		} else {
			keys.write(t, dir, "a", sa, sb)
		}
		if err := ga.reload(pathA, "test"); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		wantC := i%2 == 0
		hasC := false
		for _, p := range kernA.tunnel() {
			if p == netip.MustParsePrefix("10.103.0.0/16") {
				hasC = true
			}
		}
		if hasC != wantC {
			t.Fatalf("reload %d: kernel route to site c present=%v, want %v", i, hasC, wantC)
		}
	}
	close(stop)
	var n int
	select {
	case n = <-traffic:
	case err := <-failed:
		t.Fatal(err)
	}
	t.Logf("%d packets crossed during 1000 reloads; %d waited past the fair queue's time bound and were sent again", n, resent)
	// Each packet the fair queue dropped for its time bound must have met
	// a process short of CPU: a thread of it waiting on a run queue, or a
	// goroutine waiting for a P, for half the bound or more in the 150 ms
	// before. An expiry without that is the sealer not looking at a
	// queued packet: a defect, not the machine.
	stalls, windows, starved, err := watch.finish(150*time.Millisecond, fq.DefaultMaxDelay)
	if err != nil {
		t.Error(err)
	}
	t.Logf("%d of %d windows of 150 ms had a thread of this process waiting >= %v for a CPU", starved, windows, fq.DefaultMaxDelay)
	for _, s := range stalls {
		t.Log(s)
		if !s.starved(fq.DefaultMaxDelay) {
			t.Errorf("a packet expired in the fair queue while the process was not short of CPU: %v", s)
		}
	}
	if got := peerHandshakes(ga.r, "b"); got != hs {
		t.Fatalf("reloads renegotiated the a-b session: before %+v, after %+v", hs, got)
	}
	if v := testutil.ToFloat64(ga.m.reloads.WithLabelValues("success")); v != 1000 {
		t.Fatalf("successful reloads counted %v, want 1000", v)
	}
	for _, r := range router.Reasons() {
		d := ga.r.Drops().Get(router.Inside, r)
		if r == router.ReasonFQExpired {
			d -= uint64(resent)
		}
		if d != 0 {
			t.Errorf("A dropped %d packets for %s", d, r)
		}
	}
}

// maxExpired bounds the packets TestReloadKeepsSessions sends again after
// the fair queue's time bound dropped them: a reload that stalled the
// sealer again and again would pass it. Each must also coincide with CPU
// starvation (schedWatch).
const maxExpired = 20

// awaitPacket waits up to 5 s for pkt (packet i) to come out of dev. It
// returns early, with false, when dropped reports the packet dropped.
func awaitPacket(dev *tun.Channel, pkt []byte, i int, dropped func() bool) (bool, error) {
	deadline := time.After(5 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case got := <-dev.Outbound():
			defer dev.Release(got)
			if !bytes.Equal(got, pkt) {
				return false, fmt.Errorf("packet %d changed in transit", i)
			}
			return true, nil
		case <-poll.C:
			if dropped() {
				return false, nil
			}
		case <-deadline:
			return false, nil
		}
	}
}

// TestReloadRefusals: a bad file, or a change that needs a restart, is
// refused with a clear error; the running config keeps forwarding.
func TestReloadRefusals(t *testing.T) {
	l := newLabAB(t)
	pathA := l.path
	ga, kernA := l.startA(t)
	before := ga.cfg.Load()

	cases := []struct {
		name    string
		content string
		want    string
	}{
		{"syntax", "site: [unclosed\n", "a.yaml:"},
		{"unknown field", strings.Replace(mustRead(t, pathA), "listen:", "listne:", 1), `unknown field`},
		{"overlap", strings.Replace(mustRead(t, pathA), "10.102.0.0/16", "10.101.0.0/16", 1), "overlaps"},
		{"listen change", strings.Replace(mustRead(t, pathA), "127.0.0.1:51820", "127.0.0.1:51821", 1), "needs a restart"},
		{"tun change", strings.Replace(mustRead(t, pathA), "name: bh-a", "name: bh-x", 1), "needs a restart"},
		{"cipher change", "cipher: chachapoly\n" + mustRead(t, pathA), "needs a restart"},
		{"codel change", "codel: {target: 5ms}\n" + mustRead(t, pathA), "codel changed"},
		{"lanes change", "lanes: 3\n" + mustRead(t, pathA), `lanes changed from "one per CPU" to "3"`},
		{"express off", "express: false\n" + mustRead(t, pathA), `express changed from "true" to "false"`},
		{"express priority change", "expressPriority: 20\n" + mustRead(t, pathA), `expressPriority changed from "10" to "20"`},
		{"kubernetes added", "kubernetes: {kubeconfig: a.key}\n" + mustRead(t, pathA), "kubernetes changed from \"off\""},
		{"other site's gateway", strings.Replace(mustRead(t, pathA), "site: site-a", "site: site-b", 1), `is not a gateway of site "site-b"`},
	}
	good := mustRead(t, pathA)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(pathA, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			calls := kernA.calls
			err := ga.reload(pathA, "test")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reload error = %v, want one containing %q", err, tc.want)
			}
			if ga.cfg.Load() != before {
				t.Fatal("refused reload replaced the running config")
			}
			if kernA.calls != calls {
				t.Fatal("refused reload touched the kernel")
			}
		})
	}
	os.WriteFile(pathA, []byte(good), 0o644)
	// The good file is the running one: the reload changes no config
	// but still re-applies the kernel state, which repairs routes that
	// vanished under the gateway.
	calls := kernA.calls
	if err := ga.reload(pathA, "test"); err != nil {
		t.Fatal(err)
	}
	if kernA.calls != calls+1 || len(kernA.tunnel()) == 0 {
		t.Fatalf("reload of the unchanged file: %d kernel applies (want 1), tunnel routes %v", kernA.calls-calls, kernA.tunnel())
	}
	if ga.cfg.Load() != before {
		t.Fatal("reload of the unchanged file replaced the running config")
	}
	if v := testutil.ToFloat64(ga.m.reloads.WithLabelValues("error")); v != float64(len(cases)) {
		t.Fatalf("failed reloads counted %v, want %d", v, len(cases))
	}
}

func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// peerHandshakes is the handshake counters of r's peers of site.
func peerHandshakes(r *router.Router, site string) [4]uint64 {
	var n [4]uint64
	for _, p := range r.Peers() {
		if p.Site == site {
			n[0] += p.HandshakesInitiated
			n[1] += p.HandshakesAnswered
			n[2] += p.HandshakesCompleted
			n[3] += p.HandshakesFailed
		}
	}
	return n
}

// settledHandshakes waits until the handshakes with site b's gateways
// stop changing for a while and returns their counters.
func settledHandshakes(t *testing.T, r *router.Router) [4]uint64 {
	t.Helper()
	last, since := peerHandshakes(r, "b"), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cur := peerHandshakes(r, "b"); cur != last {
			last, since = cur, time.Now()
		} else if time.Since(since) > 3*router.TimerTick {
			return last
		}
	}
	t.Fatalf("handshakes did not settle: %v", last)
	return last
}

// TestReloadKernelFailureLog: when the new config reaches the data path
// and only kernel routes fail, the log says the new config is running
// (with its hash), not that the old one stays in force.
func TestReloadKernelFailureLog(t *testing.T) {
	l := newLabAB(t)
	dir, keys, sa, sb, pathA := l.dir, l.keys, l.a, l.b, l.path
	ga, kernA := l.startA(t)
	var logs bytes.Buffer
	ga.log = slog.New(slog.NewTextHandler(&logs, nil))
	before := ga.cfg.Load()

	sc := keys.siteYAML("c", "10.3.0.0/24", "10.103.0.0/16", "127.0.0.1:51003")
	keys.write(t, dir, "a", sa, sb, sc)
	kernA.mu.Lock()
	kernA.fail = errors.New("route add refused")
	kernA.mu.Unlock()
	if err := ga.reload(pathA, "test"); err == nil || !strings.Contains(err.Error(), "route add refused") {
		t.Fatalf("reload error = %v, want the kernel's", err)
	}
	now := ga.cfg.Load()
	if now == before {
		t.Fatal("the data path should run the new config")
	}
	out := logs.String()
	if strings.Contains(out, "stays in force") {
		t.Fatalf("log claims the old config stays in force:\n%s", out)
	}
	if !strings.Contains(out, "config is running") || !strings.Contains(out, now.Hash()) {
		t.Fatalf("log does not say the new config (hash %s) is running:\n%s", now.Hash(), out)
	}

	// A refused file still says the running config stays.
	logs.Reset()
	os.WriteFile(pathA, []byte("site: [unclosed\n"), 0o644)
	if err := ga.reload(pathA, "test"); err == nil {
		t.Fatal("bad file accepted")
	}
	if out := logs.String(); !strings.Contains(out, "stays in force") || !strings.Contains(out, now.Hash()) {
		t.Fatalf("refusal log does not name the running config:\n%s", out)
	}
}

// TestReloadUnchangedIsNotParsed: a reload of a file whose bytes hash like
// the running config's compares the hash before parsing (issue #14: each
// no-op reload of a 100k-prefix catalog parsed and checked it for
// seconds). Shown without timing: a file that would no longer pass the
// checks (its private key file is gone) but is byte-for-byte the running
// one is not looked at, only the kernel state is re-applied; one byte more
// and it is parsed, and refused.
func TestReloadUnchangedIsNotParsed(t *testing.T) {
	l := newLabAB(t)
	dir, pathA := l.dir, l.path
	ga, kernA := l.startA(t)
	before := ga.cfg.Load()
	if err := os.Remove(filepath.Join(dir, "a.key")); err != nil {
		t.Fatal(err)
	}
	calls := kernA.calls
	if err := ga.reload(pathA, "test"); err != nil {
		t.Fatalf("reload of the unchanged file parsed it: %v", err)
	}
	if kernA.calls != calls+1 || ga.cfg.Load() != before {
		t.Fatalf("unchanged reload: %d kernel applies (want 1), config replaced %v", kernA.calls-calls, ga.cfg.Load() != before)
	}
	// The watcher's reload of an unchanged file (another event on it)
	// does nothing at all: the route dump of a large table is left to
	// the periodic repair.
	if err := ga.reload(pathA, triggerWatch); err != nil || kernA.calls != calls+1 {
		t.Fatalf("watcher reload of the unchanged file: err %v, %d kernel applies (want none)", err, kernA.calls-calls-1)
	}
	if err := os.WriteFile(pathA, append([]byte(mustRead(t, pathA)), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ga.reload(pathA, "test"); err == nil || !strings.Contains(err.Error(), "a.key does not exist") {
		t.Fatalf("reload of a changed file = %v, want the missing key reported", err)
	}
}

// nonZeroDrops lists r's drop counters that are not zero.
func nonZeroDrops(r *router.Router) []string {
	var out []string
	for _, d := range []router.Direction{router.Inside, router.Outside} {
		for _, reason := range router.Reasons() {
			if n := r.Drops().Get(d, reason); n != 0 {
				out = append(out, fmt.Sprintf("%v/%v=%d", d, reason, n))
			}
		}
	}
	return out
}
