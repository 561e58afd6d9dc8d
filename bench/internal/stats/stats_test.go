package stats

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{3, 1, 2}, 50, 2},
		{[]float64{4, 1, 3, 2}, 50, 2.5},
		{[]float64{5}, 99, 5},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0, 1},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 100, 10},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9.1},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 9.91},
		{[]float64{nan, 7, nan, 1}, 50, 4},
	}
	for _, c := range cases {
		if got := Percentile(c.xs, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Percentile(%v, %g) = %g, want %g", c.xs, c.p, got, c.want)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %g, want NaN", got)
	}
	xs := []float64{3, 1, 2}
	Median(xs)
	if xs[0] != 3 {
		t.Error("Median sorted its argument in place")
	}
}
