package sim

import (
	"encoding/binary"
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

// actorRand is the simulator's stream for one of its actors: the seed's
// (the package-level actorRand), or under Config.Redraw one that switches
// to a fresh stream once the run is past the branching step.
func (s *sim) actorRand(name string) *rand.Rand {
	if s.cfg.Redraw == nil {
		return actorRand(s.cfg.Seed, name)
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(&redrawSource{step: &s.step, after: s.cfg.Redraw.After, name: h.Sum64(),
		fresh: redrawSeed(s.cfg.Seed, *s.cfg.Redraw), src: rand.NewPCG(s.cfg.Seed, h.Sum64())})
}

// redrawn tells whether the run is past its Redraw branching step.
func (s *sim) redrawn() bool { return s.cfg.Redraw != nil && s.step > s.cfg.Redraw.After }

// redrawSeed is the PCG seed of a branch's continuation: a hash of the
// run's seed, the step and the trial, so that continuations of different
// steps or trials share no numbers.
func redrawSeed(seed uint64, r Redraw) uint64 {
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(r.After))
	binary.LittleEndian.PutUint64(b[16:], r.Trial)
	h.Write(b[:])
	return h.Sum64()
}

// redrawSource is an actor's PCG stream that is the seed's up to the
// branching step and a fresh one after it. It reads the run's step
// counter: a draw belongs to the step that makes it, whichever actor
// object (made before or after the branch) draws it.
type redrawSource struct {
	step     *int64
	after    int64
	name     uint64
	fresh    uint64
	src      *rand.PCG
	switched bool
}

func (r *redrawSource) Uint64() uint64 {
	if !r.switched && *r.step > r.after {
		r.src, r.switched = rand.NewPCG(r.fresh, r.name), true
	}
	return r.src.Uint64()
}

// between draws a duration uniformly from [lo, hi].
func between(r *rand.Rand, lo, hi time.Duration) time.Duration { return faults.Between(r, lo, hi) }

// roll is a biased coin.
func roll(r *rand.Rand, p float64) bool { return p > 0 && r.Float64() < p }
