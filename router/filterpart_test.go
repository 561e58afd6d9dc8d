package router

import (
	"errors"
	"log/slog"
	"net/netip"
	"testing"
)

// TestKernelFilterPart drives kernelFilter alone, with a recordingFilter
// and a fake set of live indices: counts are folded into Drops once,
// a failed update detaches it, a refused detach keeps it and retries the
// indices it missed (only those still live).
func TestKernelFilterPart(t *testing.T) {
	newPart := func(f KernelFilter, live map[uint32]bool) (*kernelFilter, *Drops) {
		var d Drops
		return newKernelFilter(f, slog.New(slog.DiscardHandler), &d, func(idx uint32) bool { return live[idx] }), &d
	}

	t.Run("none", func(t *testing.T) {
		k, d := newPart(nil, nil)
		k.addIndex(1)
		k.poll()
		if k.attached() || k.block(mustAddr("192.0.2.1"), BlockBadMACFor) {
			t.Fatal("no filter, yet attached or blocking")
		}
		if d.snapshot() != ([numDirections][numReasons]uint64{}) {
			t.Fatal("drops counted without a filter")
		}
	})

	t.Run("counts folded once", func(t *testing.T) {
		f := newRecordingFilter()
		f.counts = [5]uint64{1, 2, 3, 4, 5}
		k, d := newPart(f, nil)
		k.poll()
		k.poll()
		f.mu.Lock()
		f.counts[0] = 11
		f.mu.Unlock()
		k.poll()
		for i, want := range []uint64{11, 2, 3, 4, 5} {
			if got := d.Get(Outside, filterReasons[i]); got != want {
				t.Errorf("%s: %d, want %d", filterReasons[i], got, want)
			}
		}
	})

	t.Run("failed add detaches", func(t *testing.T) {
		f := newRecordingFilter()
		f.failAdd = errors.New("map full")
		f.counts = [5]uint64{0, 0, 0, 7, 0}
		k, d := newPart(f, nil)
		k.addIndex(42)
		if k.attached() || !f.detached {
			t.Fatal("filter still attached after a failed AddIndex")
		}
		if got := d.Get(Outside, ReasonUnknownIndex); got != 7 {
			t.Errorf("counts at detach: unknown_index %d, want 7", got)
		}
		if k.block(mustAddr("192.0.2.1"), BlockBadMACFor) {
			t.Error("a detached filter blocked a source")
		}
	})

	t.Run("refused detach retries", func(t *testing.T) {
		f := newRecordingFilter()
		f.failAdd = errors.New("map busy")
		f.failAdds = 2
		f.failDetach = 1 << 30
		live := map[uint32]bool{7: true}
		k, _ := newPart(f, live)
		k.addIndex(7)
		k.addIndex(8) // gone before the retry
		if !k.attached() {
			t.Fatal("filter dropped although it could not be detached")
		}
		k.poll()
		got, _, _, _, _ := f.snapshot()
		if !mapsEqual(got, map[uint32]bool{7: true}) {
			t.Errorf("indices after the retry %v, want only the live 7", got)
		}
		if len(k.retry) != 0 {
			t.Errorf("retry set %v, want empty", k.retry)
		}
	})

	t.Run("block", func(t *testing.T) {
		f := newRecordingFilter()
		k, _ := newPart(f, nil)
		a := mustAddr("192.0.2.9")
		if !k.block(a, BlockBadMACFor) || f.blocked[a] != BlockBadMACFor {
			t.Fatalf("block not passed on: %v", f.blocked)
		}
	})

	t.Run("endpoints", func(t *testing.T) {
		f := newRecordingFilter()
		k, _ := newPart(f, nil)
		e1, e2 := netip.MustParseAddrPort("192.0.2.2:51820"), netip.MustParseAddrPort("192.0.2.1:51820")
		oldSt := &routingState{byEndpoint: map[netip.AddrPort]*Peer{e1: {}}}
		newSt := &routingState{byEndpoint: map[netip.AddrPort]*Peer{e2: {}}}
		k.syncEndpoints(newSt, oldSt)
		if _, eps, _, _, _ := f.snapshot(); len(eps) != 2 || eps[0] != e2 || eps[1] != e1 {
			t.Errorf("endpoints while both states are in use %v, want sorted [%v %v]", eps, e2, e1)
		}
		k.syncEndpoints(newSt, nil)
		if _, eps, _, _, _ := f.snapshot(); len(eps) != 1 || eps[0] != e2 {
			t.Errorf("endpoints %v, want [%v]", eps, e2)
		}
	})
}
