package crypto

import (
	"testing"
	"time"
)

// TestMAC1Checker agrees with CheckMAC1 on genuine and tampered messages
// and allocates nothing.
func TestMAC1Checker(t *testing.T) {
	a, b := testIdentity(t, 1, AESGCM, Prologue("t")), testIdentity(t, 2, AESGCM, Prologue("t"))
	_, msg, err := a.CreateInitiation(b.Public, 1, time.Unix(1_800_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	c := NewMAC1Checker(b.Public)
	if !c.Check(msg) || !CheckMAC1(msg, b.Public) {
		t.Fatal("genuine mac1 rejected")
	}
	other := NewMAC1Checker(a.Public)
	if other.Check(msg) {
		t.Fatal("mac1 accepted for the wrong recipient")
	}
	for i := range len(msg) - macSize { // mac2 is not covered
		bad := append([]byte(nil), msg...)
		bad[i] ^= 0x01
		if c.Check(bad) != CheckMAC1(bad, b.Public) || c.Check(bad) {
			t.Fatalf("byte %d flipped: checker %v, CheckMAC1 %v", i, c.Check(bad), CheckMAC1(bad, b.Public))
		}
	}
	if c.Check(msg[:10]) {
		t.Fatal("short message accepted")
	}
	if n := testing.AllocsPerRun(1000, func() { c.Check(msg) }); n != 0 {
		t.Fatalf("Check allocates %.1f times per call", n)
	}
}

func BenchmarkMAC1Checker(b *testing.B) {
	a, r := testIdentity(b, 1, AESGCM, Prologue("t")), testIdentity(b, 2, AESGCM, Prologue("t"))
	_, msg, _ := a.CreateInitiation(r.Public, 1, time.Unix(1_800_000_000, 0))
	c := NewMAC1Checker(r.Public)
	b.ReportAllocs()
	for b.Loop() {
		c.Check(msg)
	}
}
