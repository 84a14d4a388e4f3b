// Package stats holds the summary statistics both the analysis and the
// simulator compute, defined once. It is pure (no I/O, no imports of ours).
package stats

import (
	"math"
	"slices"
)

// Percentile returns the q-quantile (0 <= q <= 1) of xs by linear
// interpolation between order statistics: with xs sorted ascending and
// h = (len-1)·q, it is xs[⌊h⌋] + (h-⌊h⌋)·(xs[⌊h⌋+1] - xs[⌊h⌋]) (the "type 7"
// definition, the default of NumPy and R). It returns NaN for no values and
// does not modify xs.
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	h := float64(len(s)-1) * q
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}
