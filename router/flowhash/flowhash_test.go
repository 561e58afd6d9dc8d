package flowhash

import (
	"encoding/binary"
	"testing"

	"github.com/bridgehead/bridgehead/packet"
)

// udp4 returns an IPv4 UDP packet from 10.1.0.5:port to 10.2.0.7:53 with
// identification id, fragment field frag (flags and offset) and n bytes
// after the IP header. The checksums are not computed: nothing here
// checks them.
func udp4(port, id, frag uint16, n int) []byte {
	p := make([]byte, 20+n)
	p[0], p[8], p[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(p[2:4], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:6], id)
	binary.BigEndian.PutUint16(p[6:8], frag)
	copy(p[12:16], []byte{10, 1, 0, 5})
	copy(p[16:20], []byte{10, 2, 0, 7})
	if frag&0x1fff == 0 && n >= 8 { // carries the UDP header
		binary.BigEndian.PutUint16(p[20:22], port)
		binary.BigEndian.PutUint16(p[22:24], 53)
	}
	return p
}

// fragments returns the two fragments of one datagram of flow port: the
// first with the UDP header (MF set), the second at offset 824 with none.
func fragments(port, id uint16) (first, later []byte) {
	return udp4(port, id, 0x2000, 824), udp4(port, id, 824/8, 400)
}

// TestTable: a later fragment takes its first fragment's hash; one whose
// first was not seen falls back to the 3-tuple and is counted; hashing
// allocates nothing.
func TestTable(t *testing.T) {
	h := New(7)
	tab := h.NewTable()
	whole := udp4(20003, 0, 0, 100)
	first, later := fragments(20003, 100)
	if tab.Hash(first) != tab.Hash(whole) {
		t.Error("first fragment hashed unlike the flow's whole datagrams")
	}
	if tab.Hash(later) != tab.Hash(whole) {
		t.Error("later fragment hashed unlike its first")
	}
	if n := h.Misses(); n != 0 {
		t.Errorf("misses = %d before an orphan, want 0", n)
	}
	_, orphan := fragments(20003, 101) // its first never hashed
	if tab.Hash(orphan) == tab.Hash(whole) {
		t.Error("orphan fragment took the flow's hash without its first")
	}
	if n := h.Misses(); n != 1 {
		t.Errorf("misses = %d, want 1 (the orphan)", n)
	}
	if n := testing.AllocsPerRun(100, func() { tab.Hash(first); tab.Hash(later) }); n != 0 {
		t.Errorf("%.1f allocations", n)
	}
}

// TestTablesPerLane: a table remembers only its own first fragments, and
// the hasher's seed keys every hash.
func TestTablesPerLane(t *testing.T) {
	h := New(7)
	a, b := h.NewTable(), h.NewTable()
	first, later := fragments(20004, 200)
	want := a.Hash(first)
	if got := b.Hash(later); got == want {
		t.Error("lane b found lane a's first fragment")
	}
	if got := a.Hash(later); got != want {
		t.Error("lane a lost its own first fragment")
	}
	if h.Misses() != 1 {
		t.Errorf("misses = %d, want 1 (lane b's)", h.Misses())
	}
	if h.Seed() != 7 {
		t.Errorf("Seed() = %d, want 7", h.Seed())
	}
	if New(8).NewTable().Hash(first) == want {
		t.Error("another seed gave the same hash")
	}
}

// TestSlotTaken: a fragmented datagram whose slot another took between
// its fragments falls back to the 3-tuple.
func TestSlotTaken(t *testing.T) {
	h := New(7)
	tab := h.NewTable()
	first, later := fragments(20005, 300)
	want := tab.Hash(first)
	var ok bool
	for id := uint16(301); id != 300 && !ok; id++ { // find a datagram in the same slot
		f2, _ := fragments(20006, id)
		_, k1, _, _ := packet.FlowHashFragment(first, h.Seed())
		_, k2, _, _ := packet.FlowHashFragment(f2, h.Seed())
		if k1%Slots == k2%Slots && k1 != k2 {
			tab.Hash(f2)
			ok = true
		}
	}
	if !ok {
		t.Fatal("no colliding datagram found")
	}
	if tab.Hash(later) == want {
		t.Error("later fragment found a first fragment whose slot was taken")
	}
}
