// Package stats holds the order statistics the benchmark reports: the
// median of the runs and the percentiles of round-trip times.
package stats

import (
	"math"
	"slices"
)

// Median is the median of xs, NaN when xs is empty. NaN values are ignored.
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// Percentile is the p-th percentile (0..100) of xs by linear interpolation
// between closest ranks (the method of numpy's default), NaN when xs is
// empty. NaN values are ignored.
func Percentile(xs []float64, p float64) float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if p <= 0 {
		return s[0]
	}
	if p >= 100 {
		return s[len(s)-1]
	}
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	frac := rank - float64(lo)
	return s[lo] + (s[hi]-s[lo])*frac
}
