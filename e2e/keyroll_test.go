package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestKeyRollover is issue 37's proof for keys, in the two-site lab with
// a preshared key for the pair and sessions rekeyed every 2 s (so
// each step sees many handshakes): a 1 kHz UDP stream and a checksummed
// TCP transfer run from site A to site B while (a) gateway A's static key
// rotates (bridgehead rotate-key --write-config on A, the new catalog
// lines on B) and (b) the pair's preshared key rotates in three steps on
// both sides. Each step reports the datagrams lost (goal 0), the longest
// gap and whether TCP arrived intact. Then: a handshake made with A's old
// key is accepted during the overlap and refused after it (on both
// sides); preshared keys that differ are a counted, logged mismatch; and
// a peer partitioned through a whole overlap recovers once its catalog
// has the new key.
func TestKeyRollover(t *testing.T) {
	requireRoot(t)
	binaries(t) // built once per test binary: not this test's time
	began := time.Now()
	pskDir := t.TempDir()
	k1, k2, k3 := newPSK(t), newPSK(t), newPSK(t)
	pskA, pskB := filepath.Join(pskDir, "a-b.psk"), filepath.Join(pskDir, "b-a.psk")
	writePSK(t, pskA, k1)
	writePSK(t, pskB, k1)
	l := startLab(t, "RUN_ARGS=--rekey-after 2s",
		"CONFIG_EXTRA_A=presharedKeys:\n  - site: site-b\n    file: "+pskA,
		"CONFIG_EXTRA_B=presharedKeys:\n  - site: site-a\n    file: "+pskB)
	kr := &keyRoll{lab: l, began: began}
	kr.lap("lab started")
	l.probe("a-node", "ping", "-src", "10.244.1.10", "-count", "3", "-allow-loss", "1", "10.245.1.10")

	// (a) A's static key rotates.
	var rot rotated
	kr.during("a: gateway A's key rotates", 7020, func() {
		rot = kr.rotateA(12 * time.Second)
		kr.learn("b", rot)
		// B's next handshake with A, once B knows A's new key, is on it.
		kr.waitHandshake("b", "gw-a1", "site-a", 10*time.Second, func() {})
	})
	// During the overlap a handshake made with A's old key (from its old
	// private key) is still answered by B. It is sent after the measured
	// stream: B takes it for a new session of A's, which displaces the
	// session A's packets use (as any crossing handshake may), and roams
	// to its source port until A's next packet; that is a forger's doing,
	// not the rotation's.
	prevB := `bridgehead_peer_handshakes_total{gateway="gw-a1",result="previous_key",site="site-a"}`
	before := metric(l.metrics("b"), prevB)
	if left := time.Until(rot.until); left < 3*time.Second {
		t.Fatalf("step (a) left %v of the overlap, too little to try A's old key within it", left)
	}
	kr.sendInitiation(rot.previousKeyFile, "b")
	l.waitMetric("b", prevB, before+1)
	if got := metric(l.metrics("b"), `bridgehead_peer_handshakes_total{gateway="gw-a1",result="psk_mismatch",site="site-a"}`); got != 0 {
		t.Errorf("B counted %v preshared-key mismatches during the key rotation", got)
	}

	// (b) The pair's preshared key rotates: each side first accepts the
	// new key, then answers with it, then drops the old one. Every mixed
	// state lasts until a handshake completed in it (a fixed sleep could
	// fall between two rekeys and leave a state unexercised).
	kr.during("b: the pair's preshared key rotates", 7021, func() {
		for _, keys := range [][]bhcrypto.PresharedKey{{k1, k2}, {k2, k1}, {k2}} {
			writePSK(t, pskA, keys...)
			kr.keysReloaded("a")
			kr.waitHandshake("b", "gw-a1", "site-a", 10*time.Second, func() {})
			writePSK(t, pskB, keys...)
			kr.keysReloaded("b")
			kr.waitHandshake("b", "gw-a1", "site-a", 10*time.Second, func() {})
		}
	})
	second := 0.0
	for _, s := range []string{"a", "b"} {
		m := l.metrics(s)
		other := map[string]string{"a": `gateway="gw-b1",result="%s",site="site-b"`, "b": `gateway="gw-a1",result="%s",site="site-a"`}[s]
		if got := metric(m, "bridgehead_peer_handshakes_total{"+fmt.Sprintf(other, "psk_mismatch")+"}"); got != 0 {
			t.Errorf("gateway %s counted %v preshared-key mismatches during the rotation", s, got)
		}
		second += metric(m, "bridgehead_peer_handshakes_total{"+fmt.Sprintf(other, "second_psk")+"}")
	}
	if second == 0 {
		t.Error("no handshake completed with the second preshared key: the rotation's mixed states were not exercised")
	}
	t.Logf("preshared-key rotation: %v handshakes completed with the second key", second)

	// After the overlap the old key is refused. (b) ran meanwhile: the
	// overlap has ended.
	time.Sleep(time.Until(rot.until) + time.Second)
	expired := `bridgehead_dropped_packets_total{direction="outside",reason="key_expired"}`
	kr.sendInitiation(rot.previousKeyFile, "b")
	l.waitMetric("b", expired, 1)
	// ...and to A's old key: refused as expired, or, once A's timers
	// retired it, because its mac1 fits no key of A's.
	refusedA := func() float64 {
		m := l.metrics("a")
		return metric(m, expired) + metric(m, `bridgehead_dropped_packets_total{direction="outside",reason="bad_mac"}`)
	}
	was := refusedA()
	kr.sendInitiationTo(filepath.Join(l.dir, "b.key"), rot.previous, "a")
	for deadline := time.Now().Add(10 * time.Second); refusedA() <= was; time.Sleep(scrapeEvery) {
		if time.Now().After(deadline) {
			t.Fatal("A did not refuse a handshake made to its old key after the overlap")
		}
	}
	if got := metric(l.metrics("b"), prevB); got != before+1 {
		t.Errorf("B answered the old key %v times in all, want %v (once, in the overlap)", got, before+1)
	}
	t.Logf("old key: accepted in the overlap, refused after it (B key_expired %v, A refused +%v)",
		metric(l.metrics("b"), expired), refusedA()-was)
	kr.lap("after the overlap")

	// Keys that differ: counted and logged by whichever side initiates
	// (the other answers with a key it cannot know is wrong), and healed
	// by the right key.
	writePSK(t, pskA, k3)
	kr.keysReloaded("a")
	mismatches := func() (float64, string) {
		a := metric(l.metrics("a"), `bridgehead_peer_handshakes_total{gateway="gw-b1",result="psk_mismatch",site="site-b"}`)
		b := metric(l.metrics("b"), `bridgehead_peer_handshakes_total{gateway="gw-a1",result="psk_mismatch",site="site-a"}`)
		if a > 0 {
			return a + b, "a"
		}
		return a + b, "b"
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(scrapeEvery) {
		n, side := mismatches()
		if n > 0 {
			log, _ := os.ReadFile(filepath.Join(l.dir, side+".log"))
			if !strings.Contains(string(log), "preshared key") {
				t.Errorf("gateway %s counted %v preshared-key mismatches and logged none", side, n)
			}
			t.Logf("preshared keys that differ: %v mismatches counted, logged by gateway %s", n, side)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("preshared keys that differ: no mismatch counted within 10 s")
		}
	}
	writePSK(t, pskA, k2)
	kr.keysReloaded("a")
	kr.waitHandshake("a", "gw-b1", "site-b", 10*time.Second, func() {})
	kr.lap("preshared keys that differ, and healed")

	// (c) B is cut off through a whole overlap of A's next rotation. On
	// its return its catalog still has the retired key; once the catalog
	// has the new one, a handshake completes and traffic flows.
	l.mustExec("a-gw", "ip", "link", "set", "wan", "down")
	rot2 := kr.rotateA(5 * time.Second)
	time.Sleep(time.Until(rot2.until) + 1500*time.Millisecond)
	l.mustExec("a-gw", "ip", "link", "set", "wan", "up")
	var reloaded time.Time
	took := kr.waitHandshake("b", "gw-a1", "site-a", 15*time.Second, func() {
		kr.learn("b", rot2)
		reloaded = time.Now() // B logged its reload
	})
	l.probe("a-node", "ping", "-src", "10.244.1.10", "-count", "3", "-allow-loss", "1", "10.245.1.10")
	t.Logf("partitioned through the overlap: B handshook with A's new key %v after its reload with the new catalog",
		max(0, took.Sub(reloaded)).Round(time.Millisecond))
	kr.lap("c: partitioned through an overlap")
	t.Logf("TestKeyRollover took %v (lab included)", time.Since(began).Round(time.Second))
}

// scrapeEvery paces the test's polls of the gateways' metrics (a scrape
// of a -race gateway takes about a second already).
const scrapeEvery = 50 * time.Millisecond

// keyRoll drives the lab's gateways for TestKeyRollover.
type keyRoll struct {
	*lab
	logSeen map[string]int // waitLog's count of each line it waited for
	lapped  time.Time      // lap's last mark
	began   time.Time
}

// lap logs how long the test's last part took: where its time goes.
func (k *keyRoll) lap(what string) {
	now := time.Now()
	if k.lapped.IsZero() {
		k.lapped = k.began
	}
	k.t.Logf("%s: %.1f s", what, now.Sub(k.lapped).Seconds())
	k.lapped = now
}

// rotated is what rotate-key printed.
type rotated struct {
	current, previous string // public keys
	until             time.Time
	previousKeyFile   string
}

var rotateLine = regexp.MustCompile(`(?m)^\s*(publicKey|previousPublicKey|previousKeyExpires): (\S+)$`)

// rotateA runs bridgehead rotate-key --write-config on gateway A (its
// config's reload, by the file watch, applies it) and waits for A to log
// the rotation.
func (k *keyRoll) rotateA(overlap time.Duration) rotated {
	k.t.Helper()
	cfg := filepath.Join(k.dir, "a.yaml")
	out, err := exec.Command(filepath.Join(k.bin, "bridgehead"), "rotate-key", "--config", cfg, "--overlap", overlap.String(), "--write-config").CombinedOutput()
	if err != nil {
		k.t.Fatalf("rotate-key: %v\n%s", err, out)
	}
	r := rotated{previousKeyFile: filepath.Join(k.dir, "a.key.previous")}
	for _, m := range rotateLine.FindAllStringSubmatch(string(out), -1) {
		switch m[1] {
		case "publicKey":
			r.current = m[2]
		case "previousPublicKey":
			r.previous = m[2]
		case "previousKeyExpires":
			if r.until, err = time.Parse(time.RFC3339, m[2]); err != nil {
				k.t.Fatal(err)
			}
		}
	}
	if r.current == "" || r.previous == "" || r.until.IsZero() {
		k.t.Fatalf("rotate-key output:\n%s", out)
	}
	k.waitLog("a", "gateway key rotated", r.current)
	return r
}

// learn gives gateway site's catalog the rotation's lines for gw-a1, as
// an operator distributes rotate-key's output; its file watch reloads it.
func (k *keyRoll) learn(site string, r rotated) {
	k.t.Helper()
	path := filepath.Join(k.dir, site+".yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		k.t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var out []string
	inA := false
	for _, line := range lines {
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trim, "- name: "):
			inA = trim == "- name: gw-a1"
		case inA && (strings.HasPrefix(trim, "previousPublicKey:") || strings.HasPrefix(trim, "previousKeyExpires:")):
			continue
		case inA && strings.HasPrefix(trim, "publicKey:"):
			indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
			out = append(out, indent+"publicKey: "+r.current, indent+"previousPublicKey: "+r.previous,
				indent+"previousKeyExpires: "+r.until.UTC().Format(time.RFC3339))
			continue
		}
		out = append(out, line)
	}
	writeAtomic(k.t, path, strings.Join(out, "\n"))
	k.waitLog(site, "config reloaded", "")
}

// during runs action while a 1 kHz UDP stream and a paced TCP transfer
// (16 Mbit/s) go from pod A to pod B, and reports both; any datagram
// lost or a corrupted transfer fails the test. Both start a second
// before the action and stop a second after it, so the step lasts as
// long as its action, whatever the machine's load: the stream and the
// sender are stopped (a datagram still in flight is not lost: the sink
// counts gaps below the highest sequence number it saw, and it stops
// last), and the receiver's bytes are checked against the sender's
// seeded content, a prefix of which it got.
func (k *keyRoll) during(step string, port int, action func()) {
	k.t.Helper()
	const rate, mbps, seed = 1000, 16, 1
	bhprobe := filepath.Join(k.bin, "bhprobe")
	sink := k.sinkAt("b-node", "10.245.1.10", port)
	_, recvDone := k.bgListening("b-node", bhprobe, "tcp-recv", "-listen", fmt.Sprintf("10.245.1.10:%d", port+100), "-timeout", "120s")
	stopStream, _ := k.bg("a-node", bhprobe, "udp-stream", "-src", "10.244.1.10",
		"-rate", strconv.Itoa(rate), "-duration", "100s", fmt.Sprintf("10.245.1.10:%d", port))
	stopSend, _ := k.bg("a-node", bhprobe, "tcp-send", "-src", "10.244.1.10", "-seed", strconv.Itoa(seed),
		"-bytes", strconv.Itoa(1<<30), "-mbps", strconv.Itoa(mbps), "-timeout", "120s", fmt.Sprintf("10.245.1.10:%d", port+100))
	dropsBefore := map[string]map[string]float64{"a": k.drops("a"), "b": k.drops("b")}
	time.Sleep(time.Second)
	acting := time.Now()
	action()
	acted := time.Since(acting)
	time.Sleep(time.Second)
	stopStream()
	stopSend()
	covered := time.Since(acting)
	received := recvDone()
	time.Sleep(300 * time.Millisecond) // what is in flight arrives
	st := sink()["0"]
	// The stream ran through the whole action: it had sent, by the
	// last datagram the sink saw, all it sends from the action's start
	// to its stop (less 200 ms for the last ones' way).
	sent := st.Received + st.Lost
	need := uint64((covered - 200*time.Millisecond).Milliseconds()) * rate / 1000
	n, sum := int64(-1), ""
	if m := regexpFind(`received (\d+) bytes sha256 ([0-9a-f]{64})`, received); m != nil {
		n, _ = strconv.ParseInt(m[1], 10, 64)
		sum = m[2]
	}
	intact := n > 0 && sum == seededSHA256(seed, n)
	k.t.Logf("%s: %d datagrams received, %d lost, %d twice, longest gap %.1f ms; TCP %d bytes (%.1f Mbit/s) intact: %v; action %.1f s",
		step, st.Received, st.Lost, st.Duplicates, st.MaxGapMs, n, float64(n)*8/covered.Seconds()/1e6, intact, acted.Seconds())
	if st.Lost != 0 || st.Duplicates != 0 || sent < need {
		var drops []string
		for _, s := range []string{"a", "b"} {
			for series, v := range k.drops(s) {
				if d := v - dropsBefore[s][series]; d != 0 {
					drops = append(drops, fmt.Sprintf("%s %s +%v", s, series, d))
				}
			}
		}
		k.t.Errorf("%s: %d datagrams received, %d lost, %d twice, %d sent of the %d the action and its second after need; want none lost (gateway drops meanwhile: %v)",
			step, st.Received, st.Lost, st.Duplicates, sent, need, drops)
	}
	if !intact || n < 1<<20 {
		k.t.Errorf("%s: TCP transfer not intact (or under 1 MiB): receiver %s; want the first bytes of seed %d", step, received, seed)
	}
	k.lap(step)
}

// seededSHA256 is the sha256 of the first n bytes `bhprobe tcp-send
// -seed seed` sends (its ChaCha8 stream).
func seededSHA256(seed uint64, n int64) string {
	rng := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		rng.Read(chunk)
		h.Write(chunk)
		n -= int64(len(chunk))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// drops returns gateway site's drop counters by series.
func (k *keyRoll) drops(site string) map[string]float64 {
	return dropCounters(k.metrics(site))
}

// dropCounters reads a scrape's drop counters by series.
func dropCounters(scrape string) map[string]float64 {
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^(bridgehead_dropped_packets_total\{[^}]*\}) (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(scrape, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = v
	}
	return out
}

// keysReloaded waits until gateway site applied its changed key files:
// the gateway watches them (a Secret volume's update is seen the same
// way), so nothing needs to signal it.
func (k *keyRoll) keysReloaded(site string) {
	k.t.Helper()
	k.waitLog(site, "key files reloaded", "")
}

// waitLog waits until gateway site's log has one more line containing
// both msg and and than it had at the last call for msg.
func (k *keyRoll) waitLog(site, msg, and string) {
	k.t.Helper()
	path := filepath.Join(k.dir, site+".log")
	count := func() int {
		raw, _ := os.ReadFile(path)
		n := 0
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, msg) && strings.Contains(line, and) {
				n++
			}
		}
		return n
	}
	if k.logSeen == nil {
		k.logSeen = map[string]int{}
	}
	key := site + "\x00" + msg + "\x00" + and
	want := k.logSeen[key] + 1
	deadline := time.Now().Add(10 * time.Second)
	for count() < want {
		if time.Now().After(deadline) {
			raw, _ := os.ReadFile(path)
			k.t.Fatalf("gateway %s did not log %q (%q) within 10 s:\n%s", site, msg, and, raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	k.logSeen[key] = count()
}

// waitHandshake runs then and waits until gateway site completes or
// answers a handshake with gw that it had not before then; it returns when
// it saw it.
func (k *keyRoll) waitHandshake(site, gw, gwSite string, limit time.Duration, then func()) time.Time {
	k.t.Helper()
	series := func(r string) string {
		return fmt.Sprintf(`bridgehead_peer_handshakes_total{gateway=%q,result=%q,site=%q}`, gw, r, gwSite)
	}
	sum := func() float64 {
		m := k.metrics(site)
		return metric(m, series("completed")) + metric(m, series("answered"))
	}
	start := sum()
	then()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(scrapeEvery) {
		if sum() > start {
			return time.Now()
		}
	}
	k.t.Fatalf("gateway %s: no new handshake with %s within %v", site, gw, limit)
	return time.Time{}
}

// sendInitiation sends gateway B a handshake initiation made with the
// private key in keyFile (A's old key), from A's gateway namespace.
func (k *keyRoll) sendInitiation(keyFile, to string) {
	k.t.Helper()
	cfg, err := config.Load(filepath.Join(k.dir, "b.yaml"))
	if err != nil {
		k.t.Fatal(err)
	}
	pub := ""
	for _, s := range cfg.Sites {
		for _, g := range s.Gateways {
			if g.Name == "gw-b1" {
				pub = g.PublicKey
			}
		}
	}
	k.sendInitiationTo(keyFile, pub, to)
}

// sendInitiationTo sends gateway `to` ("a" or "b") an initiation made with
// the private key in keyFile to the public key toKey, from the other
// gateway's namespace (bash's /dev/udp: any source port).
func (k *keyRoll) sendInitiationTo(keyFile, toKey, to string) {
	k.t.Helper()
	cfg, err := config.Load(filepath.Join(k.dir, to+".yaml"))
	if err != nil {
		k.t.Fatal(err)
	}
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		k.t.Fatal(err)
	}
	priv, err := bhcrypto.ParsePrivateKey(string(raw))
	if err != nil {
		k.t.Fatal(err)
	}
	cipher, err := bhcrypto.ParseCipher(cfg.Cipher)
	if err != nil {
		k.t.Fatal(err)
	}
	dst, err := bhcrypto.ParsePublicKey(toKey)
	if err != nil {
		k.t.Fatal(err)
	}
	id := bhcrypto.NewIdentity(priv, cipher, bhcrypto.Prologue(cfg.Cluster.Name))
	var psks []bhcrypto.PresharedKey
	if len(cfg.PresharedKeys) > 0 {
		b, _ := os.ReadFile(cfg.PresharedKeyPath(cfg.PresharedKeys[0]))
		if psks, err = bhcrypto.ParsePresharedKeys(b); err != nil {
			k.t.Fatal(err)
		}
	}
	_, msg, err := id.CreateInitiationPSK(dst, psks, 0x5eed, time.Now())
	if err != nil {
		k.t.Fatal(err)
	}
	file := filepath.Join(k.dir, "initiation.bin")
	if err := os.WriteFile(file, msg, 0o600); err != nil {
		k.t.Fatal(err)
	}
	from, addr := "a-gw", "203.0.113.2" // to B
	if to == "a" {
		from, addr = "b-gw", "203.0.113.1"
	}
	k.mustExec(from, "bash", "-c", fmt.Sprintf("cat %s >/dev/udp/%s/51820", file, addr))
}

func newPSK(t *testing.T) bhcrypto.PresharedKey {
	t.Helper()
	var k bhcrypto.PresharedKey
	if _, err := rand.Read(k[:]); err != nil {
		t.Fatal(err)
	}
	return k
}

// writePSK writes a preshared-key file (mode 0600), the first key the one
// the gateway answers with.
func writePSK(t *testing.T, path string, keys ...bhcrypto.PresharedKey) {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k[:]) + "\n")
	}
	writeAtomicMode(t, path, b.String(), 0o600)
}

func writeAtomic(t *testing.T, path, data string) { writeAtomicMode(t, path, data, 0o644) }

func writeAtomicMode(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
