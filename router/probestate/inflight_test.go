package probestate

import "testing"

// TestProbesInFlight: a probe is answered once, only while younger than
// the timeout and only if sent; expire takes out the old ones and counts
// the small probes among them as missed, not the MTU probes.
func TestProbesInFlight(t *testing.T) {
	const timeout = 100
	var f InFlight
	f.Sent(1000)
	f.Sent(1050 | MTUEcho)
	f.Sent(1090)
	steps := []struct {
		name string
		do   func() bool
		want bool
	}{
		{"never sent", func() bool { return f.Answer(1010, 1020, timeout) }, false},
		{"echo 0", func() bool { return f.Answer(0, 1020, timeout) }, false},
		{"in flight", func() bool { return f.Answer(1000, 1020, timeout) }, true},
		{"answered twice", func() bool { return f.Answer(1000, 1030, timeout) }, false},
		{"too old", func() bool { return f.Answer(1050|MTUEcho, 1151, timeout) }, false},
		{"expire: the MTU probe, not missed", func() bool { return f.Expire(1160, timeout) == 0 }, true},
		{"its answer after it expired", func() bool { return f.Answer(1050|MTUEcho, 1140, timeout) }, false},
		{"expire: the small one, missed", func() bool { return f.Expire(1200, timeout) == 1 }, true},
		{"nothing left", func() bool { return f.Expire(5000, timeout) == 0 }, true},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s: %v, want %v", s.name, got, s.want)
		}
	}
	var wrap InFlight // the oldest slot is reused: forgotten
	for i := range InFlightSlots + 1 {
		wrap.Sent(uint64(1000 + i))
	}
	if wrap.Answer(1000, 1010, timeout) || !wrap.Answer(1001, 1010, timeout) {
		t.Error("a full ring forgets its oldest probe, and only that")
	}
	if n := testing.AllocsPerRun(100, func() { wrap.Sent(2000); wrap.Answer(2000, 2001, timeout) }); n != 0 {
		t.Errorf("%.1f allocations", n)
	}
}
