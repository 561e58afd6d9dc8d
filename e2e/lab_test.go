package e2e

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
)

// lab is a running two-site lab.
type lab struct {
	env    []string // extra environment for lab.sh
	t      *testing.T
	dir    string // state dir of lab.sh
	prefix string
	bin    string // directory with bridgehead and bhprobe
	root   string // repository root
	// setup is the lab script (deploy/lab/lab.sh unless set) and logs
	// the gateway logs to show when a test fails.
	setup string
	logs  []string
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// requireRoot skips the test without root, except in CI where a skip would
// hide a broken data path, and with -short.
func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end tests do not run with -short (make test-short)")
	}
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("end-to-end tests need root; CI runs as root")
	}
	t.Skip("end-to-end tests need root (network namespaces, TUN)")
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// binaries builds bridgehead and bhprobe once per test binary.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "bridgehead-e2e-bin")
		if buildErr != nil {
			return
		}
		root := repoRoot(t)
		for _, cmd := range []string{"bridgehead", "bhprobe"} {
			c := exec.Command("go", "build", "-race", "-o", filepath.Join(buildDir, cmd), "./cmd/"+cmd)
			c.Dir = root
			if out, err := c.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", cmd, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// startLab builds the lab with a prefix unique to this test process and
// tears it down when the test ends.
func startLab(t *testing.T, extraEnv ...string) *lab {
	return startLabScript(t, "deploy/lab/lab.sh", []string{"a", "b"}, extraEnv...)
}

// startLabScript builds a lab with setup (a script taking up/down like
// lab.sh) and shows the named gateway logs if the test fails.
func startLabScript(t *testing.T, setup string, logs []string, extraEnv ...string) *lab {
	t.Helper()
	return startLabPrefix(t, setup, labPrefix(), logs, extraEnv...)
}

// startLabPrefix is startLabScript with the namespaces' prefix chosen.
func startLabPrefix(t *testing.T, setup, prefix string, logs []string, extraEnv ...string) *lab {
	t.Helper()
	requireRoot(t)
	l := &lab{
		env:    extraEnv,
		t:      t,
		dir:    t.TempDir(),
		prefix: prefix,
		bin:    binaries(t),
		root:   repoRoot(t),
		setup:  setup,
		logs:   logs,
	}
	t.Cleanup(func() {
		if t.Failed() {
			l.logState(t)
		}
		l.script("down", l.dir)
		if t.Failed() {
			for _, s := range l.logs {
				if b, err := os.ReadFile(filepath.Join(l.dir, s+".log")); err == nil {
					t.Logf("%s log:\n%s", s, b)
				}
			}
		}
	})
	if out, err := l.script("up", l.dir, l.prefix); err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	return l
}

// labPrefix names this test process's namespaces: E2E_PREFIX when set
// (several people or agents sharing a machine), then the process id.
func labPrefix() string {
	return fmt.Sprintf("%s%d", cmp.Or(os.Getenv("E2E_PREFIX"), "bht"), os.Getpid()%100000)
}

func (l *lab) script(args ...string) ([]byte, error) {
	c := exec.Command(filepath.Join(l.root, l.setup), args...)
	c.Env = append(append(os.Environ(), "BRIDGEHEAD="+filepath.Join(l.bin, "bridgehead"), "BHPROBE="+filepath.Join(l.bin, "bhprobe")), l.env...)
	return c.CombinedOutput()
}

// ns is the full name of a lab namespace ("a-node", "b-gw", ...).
func (l *lab) ns(name string) string { return l.prefix + "-" + name }

// exec runs a command in a lab namespace and returns its output.
func (l *lab) exec(ns string, args ...string) (string, error) {
	c := exec.Command("ip", append([]string{"netns", "exec", l.ns(ns)}, args...)...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

// mustExec runs a command in a lab namespace and fails the test on error.
func (l *lab) mustExec(ns string, args ...string) string {
	l.t.Helper()
	out, err := l.exec(ns, args...)
	if err != nil {
		l.t.Fatalf("in %s: %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return out
}

func (l *lab) probe(ns string, args ...string) string {
	l.t.Helper()
	return l.mustExec(ns, append([]string{filepath.Join(l.bin, "bhprobe")}, args...)...)
}

// stateSeries are the series a failed test shows of each gateway: what
// its logs do not say (sessions, lanes, the express lane).
var stateSeries = regexp.MustCompile(`(?m)^bridgehead_(peer_session_features|peer_handshakes_total|peer_up|peer_session_age_seconds|express_[a-z_]+|lane_strays_total)[ {].*$`)

// logState logs to t (the lab's own test: l.t may be a finished
// subtest's) stateSeries of each gateway whose log the test shows, as
// far as they can still be scraped; it never fails the test.
func (l *lab) logState(t *testing.T) {
	for _, s := range l.logs {
		out, err := l.scrape(s)
		if err != nil {
			continue
		}
		t.Logf("%s state at the failure:\n%s", s, strings.Join(stateSeries.FindAllString(out, -1), "\n"))
	}
}

// metrics scrapes a gateway's /metrics ("a" or "b").
func (l *lab) metrics(site string) string {
	l.t.Helper()
	out, err := l.scrape(site)
	if err != nil {
		l.t.Fatalf("scraping gateway %s: %v\n%s", site, err, out)
	}
	return out
}

// scrape is metrics without failing the test.
func (l *lab) scrape(site string) (string, error) {
	return l.exec(site+"-gw", filepath.Join(l.bin, "bhprobe"), "http-get", "http://127.0.0.1:9641/metrics")
}

// metric returns the value of one series in a scrape, or -1.
func metric(scrape, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// waitMetric polls a gateway's metrics until series reaches at least want.
func (l *lab) waitMetric(site, series string, want float64) float64 {
	l.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := metric(l.metrics(site), series)
		if v >= want {
			return v
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("gateway %s: %s = %v, want >= %v", site, series, v, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// transfer sends n checksummed bytes over TCP from one node to the other
// and fails the test unless the receiver saw the same bytes. It returns
// the sender's address as the receiver saw it (host:port).
func (l *lab) transfer(fromNS, src, toNS, dst string, port, n int) string {
	l.t.Helper()
	recv := exec.Command("ip", "netns", "exec", l.ns(toNS), filepath.Join(l.bin, "bhprobe"), "tcp-recv",
		"-listen", joinHostPort(dst, port), "-timeout", "180s")
	recvOut := &syncbuf.Buffer{}
	recv.Stdout, recv.Stderr = recvOut, recvOut
	if err := recv.Start(); err != nil {
		l.t.Fatal(err)
	}
	defer recv.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(recvOut.String(), "listening") {
		if time.Now().After(deadline) {
			l.t.Fatalf("receiver did not start: %s", recvOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	sent := l.probe(fromNS, "tcp-send", "-src", src, "-bytes", strconv.Itoa(n), "-timeout", "180s", joinHostPort(dst, port))
	if err := recv.Wait(); err != nil {
		l.t.Fatalf("receiver: %v\n%s", err, recvOut.String())
	}
	sum := regexp.MustCompile(`(\d+) bytes sha256 ([0-9a-f]{64})(?: from (\S+))?`)
	s, r := sum.FindStringSubmatch(sent), sum.FindStringSubmatch(recvOut.String())
	if s == nil || r == nil {
		l.t.Fatalf("cannot read checksums:\nsender: %s\nreceiver: %s", sent, recvOut.String())
	}
	if s[1] != strconv.Itoa(n) || r[1] != s[1] || r[2] != s[2] {
		l.t.Fatalf("transfer corrupted: sent %s bytes %s, received %s bytes %s", s[1], s[2], r[1], r[2])
	}
	l.t.Logf("%s", strings.TrimSpace(sent))
	return r[3]
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
}

// appendPID records a process the test started in the lab, so lab.sh
// down stops it with the rest.
func appendPID(t *testing.T, l *lab, pid int) {
	f, err := openAppend(filepath.Join(l.dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintln(f, pid)
}
