package sim

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"
)

// actorRand is the random stream of one named actor: PCG(seed, fnv64a(name)).
// Actors draw only from their own stream, so adding a draw to one actor
// never shifts another's numbers.
func actorRand(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// between draws a duration uniformly from [lo, hi].
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	// The span in unsigned arithmetic: hi-lo may not fit in an int64 (the
	// fuzzer found a latency range of [-2^62, 2^62] panicking Int64N).
	// Uint64N draws exactly what Int64N drew for every span that fits.
	span := uint64(hi) - uint64(lo)
	if span == math.MaxUint64 {
		return lo + time.Duration(r.Uint64())
	}
	return lo + time.Duration(r.Uint64N(span+1))
}

// roll is a biased coin.
func roll(r *rand.Rand, p float64) bool { return p > 0 && r.Float64() < p }
