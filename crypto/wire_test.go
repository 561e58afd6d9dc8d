package crypto

import (
	"testing"
	"time"
)

func TestParseTransportHeader(t *testing.T) {
	good := make([]byte, TransportOverhead)
	good[0] = MsgTransport
	copy(good[4:], []byte{0x04, 0x03, 0x02, 0x01, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01})
	mod := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	tests := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"good", good, true},
		{"good with body", append(append([]byte(nil), good...), 1, 2, 3), true},
		{"short", good[:TransportOverhead-1], false},
		{"empty", nil, false},
		{"wrong type", mod(func(b []byte) []byte { b[0] = MsgInitiation; return b }), false},
		{"lane byte", mod(func(b []byte) []byte { b[1] = 0xff; return b }), true},
		{"reserved 2", mod(func(b []byte) []byte { b[2] = 1; return b }), false},
		{"reserved 3", mod(func(b []byte) []byte { b[3] = 0x80; return b }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, c, ok := ParseTransportHeader(tc.b)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && (r != 0x01020304 || c != 0x0102030405060708) {
				t.Fatalf("receiver %#x counter %#x", r, c)
			}
		})
	}
}

func TestPaddedLen(t *testing.T) {
	tests := []struct{ n, mtu, want int }{
		{0, 1420, 0},
		{1, 1420, 16},
		{16, 1420, 16},
		{17, 1420, 32},
		{1410, 1420, 1420}, // would round to 1424, capped at mtu
		{1420, 1420, 1420},
		{1421, 1420, 1421}, // above mtu: unchanged
		{1419, 1419, 1419},
		{1408, 1419, 1408},
		{-3, 1420, 0},
	}
	for _, tc := range tests {
		if got := PaddedLen(tc.n, tc.mtu); got != tc.want {
			t.Errorf("PaddedLen(%d, %d) = %d, want %d", tc.n, tc.mtu, got, tc.want)
		}
	}
}

func TestResponseReceiverIndex(t *testing.T) {
	a := testIdentity(t, 1, ChaChaPoly, Prologue("c"))
	b := testIdentity(t, 2, ChaChaPoly, Prologue("c"))
	_, msg1, err := a.CreateInitiation(b.Public, 0xdeadbeef, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(msg1)
	if err != nil {
		t.Fatal(err)
	}
	_, msg2, err := b.CreateResponse(ri, 7, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if idx, ok := ResponseReceiverIndex(msg2); !ok || idx != 0xdeadbeef {
		t.Fatalf("ResponseReceiverIndex = %#x, %v", idx, ok)
	}
	for _, bad := range [][]byte{nil, msg2[:ResponseSize-1], append(append([]byte(nil), msg2...), 0), msg1} {
		if _, ok := ResponseReceiverIndex(bad); ok {
			t.Fatalf("ResponseReceiverIndex accepted %d-byte message", len(bad))
		}
	}
	wrongType := append([]byte(nil), msg2...)
	wrongType[0] = MsgTransport
	if _, ok := ResponseReceiverIndex(wrongType); ok {
		t.Fatal("ResponseReceiverIndex accepted wrong type")
	}
}

func TestTimestamp(t *testing.T) {
	t0 := time.Unix(1700000000, 999999999)
	t1 := time.Unix(1700000001, 0)
	a, b := NewTimestamp(t0), NewTimestamp(t1)
	if !b.After(a) || a.After(b) || a.After(a) {
		t.Fatal("timestamp ordering wrong")
	}
	if a[0] != 0x40 {
		t.Fatalf("TAI64 label high byte = %#x, want 0x40", a[0])
	}
	if NewTimestamp(time.Unix(-5, 0)) != NewTimestamp(time.Unix(0, 0)) {
		t.Fatal("pre-epoch time not clamped")
	}
}

func TestPrologue(t *testing.T) {
	if got := string(Prologue("prod")); got != "bridgehead/1\x00prod" {
		t.Fatalf("Prologue = %q", got)
	}
}
