package daemon

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// TestReloadRotatesKey: gateway a gets a new key the way bridgehead
// rotate-key leaves it (the new key in privateKeyFile, the old one in
// previousPrivateKeyFile, the catalog naming both). Reloads apply it on
// both gateways with no restart: a answers both keys until the catalog's
// previousKeyExpires, b accepts both from a, the running session is
// kept and packets keep flowing both ways. A key file the catalog does
// not list is refused, and the running keys stay.
func TestReloadRotatesKey(t *testing.T) {
	l := newLabAB(t)
	dir, keys, sa, sb, pathA := l.dir, l.keys, l.a, l.b, l.path
	pathB := keys.write(t, dir, "b", sa, sb)
	bindA, bindB := udp.NewPair(epA, epB)
	ga, tunA, _ := startGateway(t, pathA, bindA)
	gb, tunB, _ := startGateway(t, pathB, bindB)
	podA, podB := netip.MustParseAddr("10.101.0.5"), netip.MustParseAddr("10.102.0.5")
	n := 0
	both := func(when string) {
		t.Helper()
		n++
		for _, dir := range []struct {
			from, to netip.Addr
			in, out  *tun.Channel
			name     string
		}{{podA, podB, tunA, tunB, "a to b"}, {podB, podA, tunB, tunA, "b to a"}} {
			pkt := ipv4UDP(dir.from, dir.to, []byte(fmt.Sprintf("%s %d", when, n)))
			if err := dir.in.Inject(pkt); err != nil {
				t.Fatal(err)
			}
			if ok, err := awaitPacket(dir.out, pkt, n, func() bool { return false }); !ok || err != nil {
				t.Fatalf("%s, %s: packet lost (%v); drops at a %v, at b %v", when, dir.name, err, nonZeroDrops(ga.r), nonZeroDrops(gb.r))
			}
		}
	}
	both("before")
	settledHandshakes(t, ga.r)
	sessionA := ga.r.Peers()[0].SessionCreated
	hsB := gb.r.Peers()[0].HandshakesCompleted + gb.r.Peers()[0].HandshakesAnswered

	// The rotation, as rotate-key leaves it.
	oldKey := keys.priv["a"]
	newKey, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	if err := os.WriteFile(filepath.Join(dir, "a.key.previous"), []byte(oldKey.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.key"), []byte(newKey.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys.priv["a"] = newKey
	sa = keys.siteYAML("a", "10.1.0.0/24", "10.101.0.0/16", epA.String()) +
		fmt.Sprintf("        previousPublicKey: %s\n        previousKeyExpires: %s\n", oldKey.PublicKey(), until.UTC().Format(time.RFC3339))
	keys.write(t, dir, "b", sa, sb)
	keys.write(t, dir, "a", sa, sb)
	addLine(t, pathA, "privateKeyFile: a.key\n", "previousPrivateKeyFile: a.key.previous\n")
	// The peer first, then the gateway itself; traffic between them.
	if err := gb.reload(pathB, "test"); err != nil {
		t.Fatalf("reload b: %v", err)
	}
	both("b knows the new key")
	if err := ga.reload(pathA, "test"); err != nil {
		t.Fatalf("reload a: %v", err)
	}
	both("a rotated")

	ring := ga.r.KeyRing()
	if ring.Current.Public != newKey.PublicKey() || ring.Previous == nil || ring.Previous.Public != oldKey.PublicKey() || !ring.PreviousUntil.Equal(until) {
		t.Fatalf("a's keys after the reload: current %v, previous %v until %v", ring.Current.Public, ring.Previous, ring.PreviousUntil)
	}
	pb := gb.r.Peers()[0]
	if !pb.PreviousKeyUntil.Equal(until) {
		t.Fatalf("b accepts a's previous key until %v, want %v", pb.PreviousKeyUntil, until)
	}
	if got := ga.r.Peers()[0].SessionCreated; !got.Equal(sessionA) {
		t.Fatalf("a's session was renegotiated by the rotation (created %v, was %v)", got, sessionA)
	}
	if got := pb.HandshakesCompleted + pb.HandshakesAnswered; got != hsB {
		t.Fatalf("b ran %d handshakes during the rotation; sessions must carry on", got-hsB)
	}
	if st := ga.registerStatus(); st.PreviousPublicKey != oldKey.PublicKey().String() || st.KeySignature == "" {
		t.Fatalf("status publishes previous key %q, signature %q", st.PreviousPublicKey, st.KeySignature)
	}

	// A key file the catalog does not list: refused, keys unchanged.
	stray, _ := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err := os.WriteFile(filepath.Join(dir, "a.key"), []byte(stray.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = ga.reload(pathA, "test")
	if err == nil || !strings.Contains(err.Error(), "does not match the publicKey listed") {
		t.Fatalf("reload with a key the catalog does not list: %v", err)
	}
	if ga.r.KeyRing() != ring {
		t.Fatal("a refused key file changed the running keys")
	}
	both("after the refused key")
}

// addLine inserts line after the first occurrence of after in the file.
func addLine(t *testing.T, path, after, line string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), after, after+line, 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
