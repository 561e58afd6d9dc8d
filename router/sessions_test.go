package router

import (
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestSessionsForRelay: the relay path finds sessions by index and the
// current one by key, without allocating.
func TestSessionsForRelay(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	deadline := time.Now().Add(5 * time.Second)
	var kp *bhcrypto.Keypair
	for {
		var ok bool
		if kp, _, ok = b.r.CurrentSession(a.id.Public); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no session between the pair")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, ep, _ := b.r.CurrentSession(a.id.Public)
	if ep != a.bind.LocalAddr() {
		t.Errorf("CurrentSession endpoint %v, want %v", ep, a.bind.LocalAddr())
	}
	got, key, ok := b.r.SessionByIndex(kp.LocalIndex)
	if !ok || got != kp || key != a.id.Public {
		t.Errorf("SessionByIndex(%x) = %p %v %v, want the current session with a", kp.LocalIndex, got, key, ok)
	}
	if _, _, ok := b.r.SessionByIndex(kp.LocalIndex + 1); ok {
		t.Error("SessionByIndex found an index nobody has")
	}
	if _, _, ok := b.r.CurrentSession(b.id.Public); ok {
		t.Error("CurrentSession found a session with the gateway itself")
	}
	allocs := testing.AllocsPerRun(100, func() {
		b.r.SessionByIndex(kp.LocalIndex)
		b.r.CurrentSession(a.id.Public)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per lookup", allocs)
	}
}
