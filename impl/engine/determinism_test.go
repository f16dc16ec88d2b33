package engine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scenario runs a fixed mix of inputs (several bots and streams, failures,
// key publication, membership churn, a restart) and returns every Ready.
func scenario(t *testing.T, seed uint64) []Ready {
	r := newRig(t, func(c *Config) { c.Rand = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) })
	r.reg = mixedRegistry()
	r.boot()
	out := 0
	for i := int64(1); i <= 6; i++ {
		r.step(batch("s1", "c", logEvent("s1", i, 0), logEvent("s1", i, 1)))
		r.step(batch("s2", "c", logEvent("s2", i, 0)))
		if i == 3 {
			r.step(KeyPublished{Bot: "b2"})
			r.step(MembershipChanged{Membership: Membership{Stream: "s1", Bot: "b1", From: pos(4, 0), Member: false}})
		}
		for _, s := range r.takeSends() {
			out++
			switch out % 3 {
			case 0:
				r.reply(s, OutcomeOK)
			case 1:
				r.reply(s, OutcomeStatus)
			default:
				r.reply(s, OutcomeTimeout)
			}
		}
		r.advance(1500 * time.Millisecond)
	}
	r.boot()
	for range 20 {
		for _, s := range r.takeSends() {
			r.reply(s, OutcomeOK)
		}
		r.advance(5 * time.Second)
	}
	return r.readies
}

func TestSameSeedSameEffects(t *testing.T) {
	a := scenario(t, 42)
	b := scenario(t, 42)
	require.Equal(t, a, b, "same inputs and seed must give identical effects")

	c := scenario(t, 43)
	var timersA, timersC []time.Time
	for _, rd := range a {
		for _, tm := range rd.Timers {
			timersA = append(timersA, tm.At)
		}
	}
	for _, rd := range c {
		for _, tm := range rd.Timers {
			timersC = append(timersC, tm.At)
		}
	}
	assert.NotEqual(t, timersA, timersC, "the seed drives the jitter")
}
