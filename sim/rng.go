package sim

import (
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/deliverysim/deliverysim/faults"
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
func between(r *rand.Rand, lo, hi time.Duration) time.Duration { return faults.Between(r, lo, hi) }

// roll is a biased coin.
func roll(r *rand.Rand, p float64) bool { return p > 0 && r.Float64() < p }
