package sim

import (
	"math"
	"math/bits"
	"time"
)

// scalePPM is d*ppm/1e6 truncated toward zero, as the plain int64
// expression computes it while that does not overflow, and saturated at the
// int64 range when the true value lies outside it. A drifting node's clock
// is asked about instants far from its boot (a timer "never", a retention
// horizon), and a wrapped product would move its clock backwards.
func scalePPM(d time.Duration, ppm int64) time.Duration {
	if d == 0 || ppm == 0 {
		return 0
	}
	neg := (d < 0) != (ppm < 0)
	hi, lo := bits.Mul64(absU(int64(d)), absU(ppm))
	if hi >= 1_000_000 {
		// The quotient does not fit in 64 bits.
		return saturate(neg)
	}
	q, _ := bits.Div64(hi, lo, 1_000_000)
	if q > math.MaxInt64 {
		return saturate(neg)
	}
	if neg {
		return -time.Duration(q)
	}
	return time.Duration(q)
}

// addSat is a+b saturated at the int64 range.
func addSat(a, b time.Duration) time.Duration {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return saturate(b < 0)
	}
	return s
}

func absU(x int64) uint64 {
	if x < 0 {
		return uint64(-(x + 1)) + 1
	}
	return uint64(x)
}

func saturate(neg bool) time.Duration {
	if neg {
		return math.MinInt64
	}
	return math.MaxInt64
}

// grow doubles a search step without overflowing.
func grow(step time.Duration) time.Duration {
	if step < 1<<61 {
		return 2 * step
	}
	return step
}
