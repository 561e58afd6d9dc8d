package probestate

import "testing"

// TestDamper: the answers in a row a gateway needs to be up again double
// with each down until the cap, start over at a miss, and the count of
// downs halves for every FlapDecay since the last.
func TestDamper(t *testing.T) {
	var d Damper
	decay := int64(FlapDecay)
	steps := []struct {
		name    string
		do      func()
		replies uint64 // answered so far
		need    uint64
		up      bool
	}{
		{"first down", func() { d.Down(1, 10) }, 12, RecoverProbes, false},
		{"enough in a row", func() {}, 13, RecoverProbes, true},
		{"a miss starts over", func() { d.Restart(13) }, 15, RecoverProbes, false},
		{"second down soon after", func() { d.Down(2, 20) }, 25, 2 * RecoverProbes, false},
		{"third", func() { d.Down(3, 30) }, 30 + 4*RecoverProbes, 4 * RecoverProbes, true},
		{"many more: capped", func() {
			for i := range 10 {
				d.Down(int64(4+i), 40)
			}
		}, 40 + RecoverProbes<<MaxFlapShift, RecoverProbes << MaxFlapShift, true},
		{"a down two decays later", func() { d.Down(13+2*decay, 50) }, 50, 2 * RecoverProbes, false},
		{"a down long after", func() { d.Down(13+100*decay, 60) }, 63, RecoverProbes, true},
		{"a drain is not a flap", func() { d.Drained(70) }, 70 + RecoverProbes, RecoverProbes, true},
		{"nor counts toward the next down", func() { d.Down(14+100*decay, 80) }, 80 + 2*RecoverProbes, 2 * RecoverProbes, true},
	}
	for _, s := range steps {
		s.do()
		if got := d.Need(); got != s.need {
			t.Errorf("%s: needs %d answers, want %d", s.name, got, s.need)
		}
		if got := d.Recovered(s.replies); got != s.up {
			t.Errorf("%s: recovered after %d answers: %v, want %v", s.name, s.replies-d.base, got, s.up)
		}
	}
}
