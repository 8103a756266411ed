// Package quantile computes the nearest-rank quantiles the benchmarks print (n, p50, p90,
// p99, max): a figure that is one of the samples, never an interpolation between two.
package quantile

import (
	"cmp"
	"math"
)

// Nearest is the nearest-rank quantile of sorted: the smallest value with at least p of
// the samples at or below it (p in (0, 1]; 1 is the max). The epsilon keeps a product such as
// 0.9 x 100 that floating point puts a hair above 90 from rounding up to the 91st value.
func Nearest[T cmp.Ordered](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(math.Ceil(p*float64(len(sorted))-1e-9)) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}
