package verify

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestParsePeerMsg(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    peerMsg
		wantErr bool
	}{
		{in: "BHV1 hello 0123456789abcdef", want: peerMsg{verb: "hello", nonce: "0123456789abcdef"}},
		{in: "BHV1 seen 0123456789abcdef 10.244.1.7", want: peerMsg{verb: "seen", nonce: "0123456789abcdef", src: netip.MustParseAddr("10.244.1.7")}},
		{in: "BHV1 seen 0123456789abcdef ::ffff:10.244.1.7", want: peerMsg{verb: "seen", nonce: "0123456789abcdef", src: netip.MustParseAddr("10.244.1.7")}},
		{in: "BHV1 done 0123456789abcdef", want: peerMsg{verb: "done", nonce: "0123456789abcdef"}},
		{in: "BHV1 ack 0123456789abcdef", want: peerMsg{verb: "ack", nonce: "0123456789abcdef"}},
		{in: "BHV1 seen 0123456789abcdef", wantErr: true},
		{in: "BHV1 hello 0123456789abcdef extra", wantErr: true},
		{in: "BHV1 hello 0123", wantErr: true},
		{in: "BHV1 hello 0123456789abcdeg", wantErr: true},
		{in: "BHV2 hello 0123456789abcdef", wantErr: true},
		{in: "BHV1 shout 0123456789abcdef", wantErr: true},
		{in: "BHV1 seen 0123456789abcdef not-an-ip", wantErr: true},
		{in: "", wantErr: true},
	} {
		got, err := parsePeerMsg([]byte(tc.in))
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("parsePeerMsg(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParsePeerMsg(f *testing.F) {
	f.Add([]byte("BHV1 hello 0123456789abcdef"))
	f.Add([]byte("BHV1 seen 0123456789abcdef fd00::1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parsePeerMsg(b)
		if err != nil {
			return
		}
		again, err := parsePeerMsg(m.append(nil))
		if err != nil || again != m {
			t.Fatalf("%q parsed as %+v, which reads back as %+v, %v", b, m, again, err)
		}
	})
}

// TestPeerSockets: two verify pods on loopback check each other and both
// finish; a third that never answers is reported missing after the wait.
func TestPeerSockets(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	a, err := ListenPeers(netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ListenPeers(netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	seen, rtt, err := a.Hello(ctx, netip.AddrPortFrom(lo, b.Port()), 2*time.Second)
	if err != nil || seen != lo || rtt <= 0 {
		t.Fatalf("Hello: seen %v rtt %v err %v", seen, rtt, err)
	}
	done := make(chan []netip.Addr, 1)
	go func() { done <- b.Finish(ctx, []netip.AddrPort{netip.AddrPortFrom(lo, a.Port())}, 10*time.Second) }()
	if missing := a.Finish(ctx, []netip.AddrPort{netip.AddrPortFrom(lo, b.Port())}, 10*time.Second); len(missing) != 0 {
		t.Errorf("a: missing %v", missing)
	}
	if missing := <-done; len(missing) != 0 {
		t.Errorf("b: missing %v", missing)
	}

	// A peer that is not there: Hello fails, Finish reports it.
	c, err := ListenPeers(netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	gone := netip.AddrPortFrom(lo, c.Port())
	c.Close()
	if _, _, err := a.Hello(ctx, gone, 300*time.Millisecond); err == nil {
		t.Error("Hello to a closed socket answered")
	}
	if missing := a.Finish(ctx, []netip.AddrPort{gone}, 500*time.Millisecond); !slices.Equal(missing, []netip.Addr{lo}) {
		t.Errorf("Finish with a gone peer: missing %v, want [%v]", missing, lo)
	}
}
