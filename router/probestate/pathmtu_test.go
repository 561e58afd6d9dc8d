package probestate

import "testing"

// TestMTUSearch: the prober's search converges on the largest padded
// size that passes, within a padding step, for limits across the range;
// a path that answers nothing gives no verdict, and one lost full-size
// probe does not make a gateway degraded.
func TestMTUSearch(t *testing.T) {
	const full = 1420
	sizes := Sizes{Small: 16, Full: full, Step: 16}
	// run drives a prober for n steps of 10 ns; lose says which probe
	// sizes are lost; small says whether small probes are answered.
	run := func(m *PathMTU, n int, lose func(size, i int) bool, small bool) {
		mono := int64(1)
		acked := int64(0)
		for i := range n {
			size, _ := m.Step(mono, sizes, acked, 10, 300)
			if size > 0 {
				echo := m.Sent(size, mono)
				if !lose(size, i) {
					m.Answer(echo)
				}
			}
			if small {
				acked = mono + 1 // the small probe's answer, after the big one left
			}
			mono += 10
		}
	}
	for _, limit := range []int{16, 100, 576, 1000, 1279, 1404, 1419, 1420} {
		var m PathMTU
		run(&m, 60, func(size, _ int) bool { return size > limit }, true)
		got := m.MTU()
		if got > limit || got < limit-16 || m.Degraded() != (limit < full) || m.phase != idle {
			t.Errorf("limit %d: path MTU %d, degraded %v, phase %d", limit, got, m.Degraded(), m.phase)
		}
	}
	var silent PathMTU
	run(&silent, 60, func(int, int) bool { return true }, false)
	if silent.Degraded() || silent.MTU() != 0 {
		t.Errorf("silent path: degraded %v, path MTU %d; want no verdict", silent.Degraded(), silent.MTU())
	}
	var lossy PathMTU
	run(&lossy, 60, func(_, i int) bool { return i == 0 }, true)
	if lossy.Degraded() || lossy.MTU() != full {
		t.Errorf("one lost probe: degraded %v, path MTU %d", lossy.Degraded(), lossy.MTU())
	}
}

// TestMTUPause: a full-size probe in flight when the gateway stops being
// up gets no verdict, however often that happens, and the gateway is
// checked at full size again once it is up; an answer is booked by its
// echo's send time.
func TestMTUPause(t *testing.T) {
	sizes := Sizes{Small: 16, Full: 1420, Step: 16}
	var m PathMTU
	if size, _ := m.Step(1, sizes, 0, 10, 300); size != 0 {
		t.Fatalf("first step asked for a %d-byte probe, want none before an interval", size)
	}
	mono := int64(301)
	for i := range 2 * MTUTries {
		size, _ := m.Step(mono, sizes, mono-1, 10, 300)
		if size != sizes.Full {
			t.Fatalf("round %d: probe of %d bytes, want a full-size check", i, size)
		}
		m.Sent(size, mono)
		m.Pause()   // the gateway went down with the probe in flight
		mono += 300 // an interval later it is up again, with newer evidence
		if m.Degraded() || m.MTU() != 0 {
			t.Fatalf("round %d: a paused probe gave a verdict: degraded %v, MTU %d", i, m.Degraded(), m.MTU())
		}
	}
	size, _ := m.Step(mono, sizes, mono-1, 10, 300)
	echo := m.Sent(size, mono)
	if echo&MTUEcho == 0 || SentAt(echo) != mono {
		t.Fatalf("echo %#x: want MTUEcho and the send time %d", echo, mono)
	}
	m.Answer(echo)
	if m.Answered() != mono {
		t.Errorf("Answered() = %d, want %d", m.Answered(), mono)
	}
	if _, changed := m.Step(mono+1, sizes, mono+1, 10, 300); changed || m.MTU() != sizes.Full || m.Degraded() {
		t.Errorf("answered full-size probe: MTU %d, degraded %v, changed %v; want %d, false, false", m.MTU(), m.Degraded(), changed, sizes.Full)
	}
}
