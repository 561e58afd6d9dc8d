package router

import (
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// BenchmarkIndexHandshake: the index work of one handshake (its session
// added, the oldest session retired) with 600 peers of three sessions
// each in the table, as after a restart storm. The sessions are made
// beforehand, so only the table's work is measured.
func BenchmarkIndexHandshake(b *testing.B) {
	var t indexTable
	p := &Peer{}
	const live = 600 * 3
	pool := make([]*bhcrypto.Keypair, 2*live)
	for i := range pool {
		pool[i] = &bhcrypto.Keypair{LocalIndex: uint32(i)*2654435761 + 1}
	}
	for _, kp := range pool[:live] {
		indexAdd(&t, p, kp)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		indexAdd(&t, p, pool[(i+live)%len(pool)])
		indexRetire(&t, pool[i%len(pool)])
		i++
	}
	if n := t.len(); n != live {
		b.Fatalf("%d entries, want %d", n, live)
	}
}

func indexAdd(t *indexTable, p *Peer, kp *bhcrypto.Keypair) { t.add(p, kp) }

func indexRetire(t *indexTable, kp *bhcrypto.Keypair) { t.remove(kp) }

// reset empties the table.
func (t *indexTable) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tab.Store(nil)
	t.live, t.dead = 0, 0
}

// indices returns the published indices.
func (t *indexTable) indices() map[uint32]bool {
	m := map[uint32]bool{}
	if s := t.tab.Load(); s != nil {
		for i := range s.slots {
			if e := s.slots[i].Load(); e != nil && e != indexTombstone {
				m[e.idx] = true
			}
		}
	}
	return m
}

// TestIndexTable: adds, replacements, removals that only take the session
// they name, growth and tombstone reuse keep lookups right.
func TestIndexTable(t *testing.T) {
	var tab indexTable
	var added, removed []uint32
	tab.onAdd = func(idx uint32) {
		if tab.has(idx) && tab.live == 0 {
			t.Errorf("index %d published before onAdd", idx)
		}
		added = append(added, idx)
	}
	tab.onRemove = func(idxs []uint32) { removed = append(removed, idxs...) }
	p := &Peer{}
	want := map[uint32]*bhcrypto.Keypair{}
	rnd := uint32(12345)
	for round := range 20000 {
		rnd = rnd*1664525 + 1013904223
		idx := rnd>>20 + 1 // few distinct values: replacements and reuse
		if round%3 == 2 && len(want) > 0 {
			for k, kp := range want {
				tab.remove(&bhcrypto.Keypair{LocalIndex: k}) // another session: not removed
				tab.remove(kp)
				delete(want, k)
				break
			}
			continue
		}
		kp := &bhcrypto.Keypair{LocalIndex: idx}
		tab.add(p, kp)
		want[idx] = kp
	}
	if tab.len() != len(want) {
		t.Fatalf("%d entries, want %d", tab.len(), len(want))
	}
	for idx := uint32(0); idx < 1<<12+2; idx++ {
		e, ok := tab.lookup(idx)
		kp := want[idx]
		if ok != (kp != nil) || ok && e.kp != kp {
			t.Fatalf("lookup(%d) = %v %v, want %v", idx, e.kp, ok, kp)
		}
	}
	if len(added) != 20000-20000/3 || len(removed) != 20000/3 {
		t.Errorf("onAdd %d times, onRemove saw %d indices", len(added), len(removed))
	}
	if s := tab.tab.Load(); len(s.slots) > 8*indexMinSlots*((len(want)+indexMinSlots)/indexMinSlots) {
		t.Errorf("%d slots for %d entries", len(s.slots), len(want))
	}
}

// TestIndexLookupAllocs: the outside loop's lookup allocates nothing.
func TestIndexLookupAllocs(t *testing.T) {
	var tab indexTable
	const golden uint32 = 2654435761
	for i := range uint32(600 * 3) {
		tab.add(&Peer{}, &bhcrypto.Keypair{LocalIndex: i*golden + 1})
	}
	seven := uint32(7)
	idx := seven*golden + 1
	if n := testing.AllocsPerRun(1000, func() {
		if !tab.has(idx) {
			t.Fatal("missing")
		}
	}); n != 0 {
		t.Errorf("lookup: %.1f allocations, want 0", n)
	}
}
