package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Compatibility across releases (docs/operations/releasing.md): a gateway of this
// tree keeps a session with a gateway of the previous release, the one
// CHANGELOG.md names first below "Unreleased", which the test builds from
// that release's commit.

// release is one release section of CHANGELOG.md.
type release struct {
	version string // "v0.1.0"
	commit  string // 40 hex digits
}

var (
	releaseHeading = regexp.MustCompile(`^## (v[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?)(?:\s|$)`)
	commitLine     = regexp.MustCompile("^Commit: `?([0-9a-f]{40})`?\\s*$")
)

// previousRelease reads the newest release of a CHANGELOG: the first
// "## vX.Y.Z" heading ("## Unreleased" is not one) and the "Commit:" line
// of its section, which names the full commit it was cut from.
func previousRelease(changelog io.Reader) (release, error) {
	var rel release
	sc := bufio.NewScanner(changelog)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			if rel.version != "" {
				return release{}, fmt.Errorf("line %d: the section of %s has no \"Commit: <40 hex digits>\" line before the next heading", n, rel.version)
			}
			if m := releaseHeading.FindStringSubmatch(line); m != nil {
				rel.version = m[1]
			}
			continue
		}
		if rel.version == "" || !strings.HasPrefix(line, "Commit:") {
			continue
		}
		m := commitLine.FindStringSubmatch(line)
		if m == nil {
			return release{}, fmt.Errorf("line %d: %q: want \"Commit: \" and the full 40-digit commit", n, line)
		}
		rel.commit = m[1]
		return rel, nil
	}
	if err := sc.Err(); err != nil {
		return release{}, err
	}
	if rel.version != "" {
		return release{}, fmt.Errorf("the section of %s has no \"Commit: <40 hex digits>\" line", rel.version)
	}
	return release{}, errors.New("no release: no \"## vX.Y.Z\" heading")
}

func TestPreviousReleaseParse(t *testing.T) {
	const c1 = "837a64ab76cc70c199b3f44eede3344193684d07"
	const c2 = "18528b8aa00000000000000000000000000000ff"
	for _, tc := range []struct {
		name, text string
		want       release
		err        string
	}{
		{name: "first release under Unreleased",
			text: "# Changelog\n\n## Unreleased\n\n- key rollover\n\n## v0.1.0 (2026-12-06)\n\nCommit: " + c1 + "\n",
			want: release{"v0.1.0", c1}},
		{name: "newest of two, backquoted",
			text: "## Unreleased\n## v0.2.0 (2027-01-10)\nCommit: `" + c2 + "`\n## v0.1.0\nCommit: " + c1 + "\n",
			want: release{"v0.2.0", c2}},
		{name: "a pre-release counts",
			text: "## v0.2.0-rc.1\nCommit: " + c2 + "\n",
			want: release{"v0.2.0-rc.1", c2}},
		{name: "a commit line in Unreleased is not a release's",
			text: "## Unreleased\nCommit: " + c2 + "\n## v0.1.0\nCommit: " + c1 + "\n",
			want: release{"v0.1.0", c1}},
		{name: "abbreviated commit",
			text: "## v0.1.0\nCommit: 837a64a\n", err: "full 40-digit commit"},
		{name: "newest release without a commit",
			text: "## v0.2.0\nnotes\n## v0.1.0\nCommit: " + c1 + "\n", err: "v0.2.0 has no"},
		{name: "last release without a commit",
			text: "## Unreleased\n## v0.1.0\n", err: "v0.1.0 has no"},
		{name: "no release yet",
			text: "# Changelog\n## Unreleased\n- something\n", err: "no release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := previousRelease(strings.NewReader(tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestChangelogNamesARelease: the repository's CHANGELOG.md names a
// release and its commit the way the compatibility test reads them.
func TestChangelogNamesARelease(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel, err := previousRelease(f)
	if err != nil {
		t.Fatalf("CHANGELOG.md: %v", err)
	}
	t.Logf("previous release %s, commit %s", rel.version, rel.commit)
}

// previousReleaseBinaries reads the previous release from CHANGELOG.md
// and returns it with the directory of its binaries (releaseBinaries).
func previousReleaseBinaries(t *testing.T) (release, string) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := previousRelease(f)
	f.Close()
	if err != nil {
		t.Fatalf("CHANGELOG.md: %v", err)
	}
	return rel, releaseBinaries(t, rel)
}

// compatCatalog is a catalog of two dual-stack sites with a node each,
// the lab's; %s are gateway A's key file and the two public keys.
const compatCatalog = `site: site-a
gateway: gw-a1
privateKeyFile: %s
controlSocket: /run/bridgehead-compat.sock
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16, fd00:224::/64]
    podCIDRs: [10.244.0.0/16, fd00:244::/56]
    keepalive: 10s
    probeInterval: 300ms
    gateways:
      - {name: gw-a1, address: 10.224.0.4, address6: fd00:224::4, endpoint: 203.0.113.1:51820, publicKey: %s}
    nodes:
      - {name: node-a1, address: 10.224.0.5, podCIDR: 10.244.1.0/24, address6: fd00:224::5, podCIDR6: fd00:244:0:1::/64}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24, fd00:50::/64]
    podCIDRs: [10.245.0.0/16, fd00:245::/56]
    gateways:
      - {name: gw-b1, address: 192.168.50.2, address6: fd00:50::2, endpoint: 203.0.113.2:51820, publicKey: %s}
    nodes:
      - {name: node-b1, address: 192.168.50.5, podCIDR: 10.245.1.0/24, address6: fd00:50::5, podCIDR6: fd00:245:0:1::/64}
`

// TestCompatCatalog: the catalog crosses releases through the
// resources (`catalog to-resources`, `catalog from-resources`, what the
// Kubernetes mode and its operators exchange) both ways, and the catalog
// file each release writes back is one the other accepts (`check`): a
// writer of this tree that put a field the previous release does not know
// into a catalog using no new feature fails here (docs/operations/releasing.md, rule
// 5). No root needed; it builds or reuses the previous release.
func TestCompatCatalog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release: not with -short")
	}
	rel, oldDir := previousReleaseBinaries(t)
	bins := map[string]string{"previous": filepath.Join(oldDir, "bridgehead"), "current": filepath.Join(binaries(t), "bridgehead")}
	dir := t.TempDir()
	run := func(t *testing.T, bin string, stdin string, args ...string) string {
		t.Helper()
		c := exec.Command(bins[bin], args...)
		c.Stdin = strings.NewReader(stdin)
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s (%s) %s: %v\n%s", bin, map[string]string{"previous": rel.version, "current": "this tree"}[bin], strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	write := func(t *testing.T, name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyA := write(t, "a.key", run(t, "current", "", "genkey"))
	pubA := strings.TrimSpace(run(t, "current", readFile(t, keyA), "pubkey"))
	pubB := strings.TrimSpace(run(t, "current", run(t, "current", "", "genkey"), "pubkey"))
	cfg := write(t, "a.yaml", fmt.Sprintf(compatCatalog, keyA, pubA, pubB))
	for _, tc := range []struct{ writer, reader string }{
		{"current", "previous"},
		{"previous", "current"},
	} {
		t.Run(tc.writer+" to "+tc.reader, func(t *testing.T) {
			res := write(t, tc.writer+"-resources.yaml", run(t, tc.writer, "", "catalog", "to-resources", "--config", cfg, "--nodes"))
			back := write(t, tc.reader+"-from-"+tc.writer+".yaml", run(t, tc.reader, "", "catalog", "from-resources", "--file", res, "--config", cfg))
			for _, checker := range []string{"previous", "current"} {
				if out := run(t, checker, "", "check", "--config", back); !strings.Contains(out, "2 sites, 2 gateways") {
					t.Errorf("%s check of the catalog %s wrote from %s's resources: %s", checker, tc.reader, tc.writer, out)
				}
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// releaseBuild is the cache recipe: a change here rebuilds every cached
// release.
const releaseBuild = "go build -trimpath -buildvcs=false -ldflags '-X main.version=VERSION' ./cmd/bridgehead ./cmd/bhprobe, GOTOOLCHAIN=local GOFLAGS="

// releaseBinaries returns a directory with bridgehead and bhprobe built
// from rel's commit with this toolchain, cached in
// $HOME/.cache/bridgehead/releases/<commit>/ (BRIDGEHEAD_RELEASES
// overrides the parent), so only the first run pays the build. The
// source comes from this clone's history (git archive): a shallow clone
// has no older commits and fails, saying so.
func releaseBinaries(t *testing.T, rel release) string {
	t.Helper()
	parent := os.Getenv("BRIDGEHEAD_RELEASES")
	if parent == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		parent = filepath.Join(home, ".cache", "bridgehead", "releases")
	}
	dir := filepath.Join(parent, rel.commit)
	stamp := releaseBuild + "\n" + rel.version + "\n" + runtime.Version() + "\n"
	if b, err := os.ReadFile(filepath.Join(dir, "stamp")); err == nil && string(b) == stamp {
		t.Logf("previous release %s (%.12s): cached in %s", rel.version, rel.commit, dir)
		return dir
	}
	root := repoRoot(t)
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", rel.commit+"^{commit}").CombinedOutput(); err != nil {
		shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
		if strings.TrimSpace(string(shallow)) == "true" {
			t.Fatalf("previous release %s: commit %s is not in this clone, which is shallow: "+
				"the compatibility test builds the previous release from its commit, so it needs the history "+
				"(git fetch --unshallow; CI clones fully)", rel.version, rel.commit)
		}
		t.Fatalf("previous release %s: commit %s (CHANGELOG.md) is not in this clone's history: %v %s"+
			"(fetch the branch or tag that holds it)", rel.version, rel.commit, err, out)
	}
	start := time.Now()
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	// Built beside the cache entry and renamed into place whole, so a
	// concurrent run sees either nothing or both binaries and the stamp.
	work, err := os.MkdirTemp(parent, ".build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	src, bin := filepath.Join(work, "src"), filepath.Join(work, "bin")
	for _, d := range []string{src, bin} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rel.commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		t.Fatalf("git archive %s: %v\n%s", rel.commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar -x of %s: %v\n%s", rel.commit, err, untarErr.String())
	}
	for _, cmd := range []string{"bridgehead", "bhprobe"} {
		// The extracted tree has no .git (and may sit in another
		// repository): the version comes from -X, not from VCS.
		c := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-X main.version="+rel.version, "-o", filepath.Join(bin, cmd), "./cmd/"+cmd)
		c.Dir = src
		c.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("building %s of %s (%.12s) with %s: %v\n%s", cmd, rel.version, rel.commit, runtime.Version(), err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "stamp"), []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stale entry (another recipe or toolchain) makes way; a run that
	// finished first wins and ours is dropped.
	if _, err := os.Stat(dir); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(bin, dir); err != nil {
		if b, rerr := os.ReadFile(filepath.Join(dir, "stamp")); rerr != nil || string(b) != stamp {
			t.Fatalf("caching the build of %s: %v", rel.version, err)
		}
	}
	t.Logf("previous release %s (%.12s): built in %v into %s", rel.version, rel.commit, time.Since(start).Round(100*time.Millisecond), dir)
	return dir
}

// TestCompatPreviousRelease runs the two-site lab with one gateway on the
// previous release and the other on this tree, each way round: the
// handshake, ICMP over IPv4 and IPv6 both ways, a 1 kHz UDP stream
// A to B that must lose nothing while the sessions rekey (compatRekey), TCP
// transfers both ways compared by checksum, a config reload on each
// gateway, each seeing the other up and neither counting a datagram it
// could not read; and this tree's `bridgehead status` reading the
// previous release's daemon, as it does between a package upgrade and
// the restart.
func TestCompatPreviousRelease(t *testing.T) {
	requireRoot(t)
	rel, old := previousReleaseBinaries(t)
	for _, tc := range []struct {
		name         string
		oldGW, newGW string // lab gateways ("a", "b")
	}{
		{"A previous, B current", "a", "b"},
		{"A current, B previous", "b", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The two labs run at once, each under a prefix of its
			// own: they share nothing, and the test waits on
			// processes more than it uses the CPU.
			t.Parallel()
			compatRun(t, rel, filepath.Join(old, "bridgehead"), tc.oldGW, tc.newGW)
		})
	}
}

// compatStream is how long the UDP stream of a compatibility run lasts,
// compatRekey the session lifetime during it: two rekeys at least.
const (
	compatStream = 6 * time.Second
	compatRekey  = 2 * time.Second
)

func compatRun(t *testing.T, rel release, oldBin, oldGW, newGW string) {
	start, last := time.Now(), time.Now()
	step := func(what string) {
		t.Logf("%-28s %6v (%v in all)", what, time.Since(last).Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
		last = time.Now()
	}
	l := startLabPrefix(t, "deploy/lab/lab.sh", labPrefix()+"v"+oldGW, []string{"a", "b"},
		"BRIDGEHEAD_"+strings.ToUpper(oldGW)+"="+oldBin, "RUN_ARGS=--rekey-after "+compatRekey.String())
	step("lab up")

	// Each gateway runs the binary it was given.
	if log := l.waitLog(oldGW, "starting bridgehead", 1); !strings.Contains(log, "version="+rel.version) {
		t.Fatalf("gateway %s should run %s:\n%s", oldGW, rel.version, log)
	}
	if log := l.waitLog(newGW, "starting bridgehead", 1); strings.Contains(log, "version="+rel.version+" ") {
		t.Fatalf("gateway %s should run this tree, not %s:\n%s", newGW, rel.version, log)
	}

	// The handshake, then both families both ways.
	l.probe("a-node", "ping", "-src", podA, "-count", "1", podB)
	l.probe("b-node", "ping", "-src", podB, "-count", "1", podA)
	l.probe("a-node", "ping", "-src", podA6, "-count", "1", podB6)
	l.probe("b-node", "ping", "-src", podB6, "-count", "1", podA6)
	step("handshake, pings")

	// This tree's CLI reads the previous release's control socket
	// (before the reload below adds a site that never answers, which
	// makes status exit 1).
	out, err := exec.Command(filepath.Join(l.bin, "bridgehead"), "status", "--socket", filepath.Join(l.dir, oldGW+".sock")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "site-"+newGW) {
		t.Errorf("bridgehead status (this tree) of gateway %s (%s): %v\n%s", oldGW, rel.version, err, out)
	}
	step("status")

	completed := `bridgehead_handshakes_total{result="completed"}`
	reloaded := `bridgehead_config_reloads_total{result="success"}`
	hs0 := map[string]float64{}
	for _, gw := range []string{"a", "b"} {
		hs0[gw] = metric(l.metrics(gw), completed)
	}

	// A 1 kHz stream A to B through rekeys, transfers and reloads.
	collect := l.sink(7100)
	_, streamDone := l.bg("a-node", filepath.Join(l.bin, "bhprobe"), "udp-stream", "-src", podA, "-rate", "1000", "-duration", compatStream.String(), podB+":7100")
	streamStart := time.Now()
	l.transfer("a-node", podA, "b-node", podB, 7101, 8<<20)
	l.transfer("b-node", podB, "a-node", podA, 7102, 8<<20)
	step("transfers")
	extra := siteC(t, l)
	for _, gw := range []string{oldGW, newGW} {
		l.writeConfig(gw, l.readConfig(gw)+extra)
		l.waitLog(gw, "config reloaded", 1)
	}
	step("reloads")
	time.Sleep(time.Until(streamStart.Add(compatStream)))
	sent := streamDone()
	stats := collect()
	step("stream end")
	fs, ok := stats["0"]
	if !ok {
		t.Fatalf("the sink saw no datagram of the stream (sender: %s)", strings.TrimSpace(sent))
	}
	t.Logf("UDP stream A to B: %s; received %d, lost %d, longest gap %.1f ms", strings.TrimSpace(sent), fs.Received, fs.Lost, fs.MaxGapMs)
	if want := uint64(compatStream/time.Millisecond) * 9 / 10; fs.Lost > 0 || fs.Received < want {
		t.Errorf("UDP stream A to B through rekeys and reloads: received %d, lost %d (longest gap %.1f ms at %s); want %d at least (1 kHz for %v less the sender's slack), none lost",
			fs.Received, fs.Lost, fs.MaxGapMs, fs.GapAt, want, compatStream)
	}

	for _, gw := range []string{"a", "b"} {
		m := l.metrics(gw)
		// The sessions rekeyed, each gateway initiating: completed
		// counts the handshakes a gateway initiated that its peer
		// answered, so both binaries played both roles. Two at least:
		// one may be a startup handshake completed late (TestReload).
		if d := metric(m, completed) - hs0[gw]; d < 2 {
			t.Errorf("gateway %s completed %v handshakes it initiated during the stream, want >= 2 (--rekey-after %v over %v)", gw, d, compatRekey, compatStream)
		}
		if v := metric(m, reloaded); v != 1 {
			t.Errorf("gateway %s: %s = %v, want 1", gw, reloaded, v)
		}
		// The outside drops a datagram a peer cannot read lands in: an
		// unknown type, a header or size it refuses, a tag or handshake
		// that does not verify, a control message it cannot parse.
		for _, r := range []string{"unknown_type", "bad_size", "bad_mac", "bad_tag", "handshake_failed", "malformed"} {
			series := fmt.Sprintf(`bridgehead_dropped_packets_total{direction="outside",reason=%q}`, r)
			if v := metric(m, series); v != 0 {
				t.Errorf("gateway %s: %s = %v, want 0: it received datagrams it could not read", gw, series, v)
			}
		}
		other := "gw-b1"
		if gw == "b" {
			other = "gw-a1"
		}
		if v := metric(m, fmt.Sprintf(`bridgehead_peer_up{gateway=%q,site=%q}`, other, "site-"+other[3:4])); v != 1 {
			t.Errorf("gateway %s: bridgehead_peer_up of %s = %v, want 1", gw, other, v)
		}
		// What each said of itself in its probes crossed: both
		// releases read lane bytes and have an express lane, so each
		// uses them toward the other (probe flags, docs/operations/releasing.md).
		for _, f := range []string{"lane_bytes", "express"} {
			series := fmt.Sprintf(`bridgehead_peer_session_features{feature=%q,gateway=%q,site=%q}`, f, other, "site-"+other[3:4])
			if v := metric(m, series); v != 1 {
				t.Errorf("gateway %s: %s = %v, want 1: the probe flags did not cross", gw, series, v)
			}
		}
	}

	step("metrics")

	// Needs all on N (docs/operations/releasing.md): a preshared key for the pair,
	// configured on this tree's gateway alone. Its initiations carry
	// FlagPSK, which the previous release refuses (handshake_failed),
	// and it refuses the previous release's initiations, made without
	// the key (psk_mismatch): the pair gets no new session, as
	// CHANGELOG.md and docs/operations/releasing.md warn. The session in use
	// carries on; the next rekey, which traffic starts and only the
	// session's initiator makes within --rekey-after, fails on one side
	// or the other.
	psk := make([]byte, 32)
	if _, err := rand.Read(psk); err != nil {
		t.Fatal(err)
	}
	pskFile := filepath.Join(l.dir, "pair.psk")
	if err := os.WriteFile(pskFile, []byte(base64.StdEncoding.EncodeToString(psk)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l.writeConfig(newGW, l.readConfig(newGW)+fmt.Sprintf("presharedKeys:\n  - {site: site-%s, file: %q}\n", oldGW, pskFile))
	l.waitLog(newGW, "config reloaded", 2)
	refused := fmt.Sprintf(`bridgehead_dropped_packets_total{direction="outside",reason=%q}`, "handshake_failed")
	mismatch := fmt.Sprintf(`bridgehead_dropped_packets_total{direction="outside",reason=%q}`, "psk_mismatch")
	for deadline := time.Now().Add(15 * time.Second); ; {
		l.exec("a-node", filepath.Join(l.bin, "bhprobe"), "ping", "-src", podA, "-count", "1", "-timeout", "300ms", podB)
		l.exec("b-node", filepath.Join(l.bin, "bhprobe"), "ping", "-src", podB, "-count", "1", "-timeout", "300ms", podA)
		r, m := metric(l.metrics(oldGW), refused), metric(l.metrics(newGW), mismatch)
		if r >= 1 || m >= 1 {
			t.Logf("a PSK on gateway %s alone: %s refused %v initiations with FlagPSK (handshake_failed), %s refused %v without a PSK (psk_mismatch)", newGW, rel.version, r, newGW, m)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a PSK on gateway %s alone: no handshake refused in 15 s of traffic (%s: %s %v; current: %s %v)", newGW, rel.version, refused, r, mismatch, m)
		}
	}
	step("a PSK on one side only")
}
