package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func breakerDetails(r *rig) []string {
	var out []string
	for _, n := range r.notesOf("breaker") {
		out = append(out, n.Detail)
	}
	return out
}

// openBreaker makes bot "b" fail five sends in a row.
func openBreaker(t *testing.T) *rig {
	r := newRig(t, func(c *Config) { c.MaxAttempts = 100; c.JitterFraction = 0 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 1, 2), logEvent("s", 1, 3), logEvent("s", 1, 4)))
	ss := r.takeSends()
	require.Len(t, ss, 5)
	for i, s := range ss {
		r.reply(s, OutcomeStatus)
		if i < 4 {
			assert.Empty(t, breakerDetails(r), "closed until the fifth consecutive failure")
		}
	}
	require.Equal(t, []string{"closed->open"}, breakerDetails(r))
	require.Equal(t, 1, r.eng.Counters().BreakerOpened)
	return r
}

func TestBreakerOpenDefersThenHalfOpensThenCloses(t *testing.T) {
	r := openBreaker(t)
	opened := r.clk.t

	// Retries fall due (1 s later) but the open breaker defers them.
	r.advance(60*time.Second - time.Nanosecond)
	assert.Empty(t, r.takeSends(), "open: no requests at all")
	assert.Len(t, r.messages("b"), 5, "open defers, never drops")

	r.advance(time.Nanosecond)
	assert.Equal(t, opened.Add(60*time.Second), r.clk.t)
	assert.Equal(t, []string{"closed->open", "open->half-open"}, breakerDetails(r))
	ss := r.takeSends()
	require.Len(t, ss, 1, "half-open lets one request through")

	for i := range 3 {
		r.reply(ss[0], OutcomeOK)
		ss = r.takeSends()
		if i < 2 {
			require.Len(t, ss, 1, "still half-open after %d successes: one at a time", i+1)
		}
	}
	assert.Equal(t, []string{"closed->open", "open->half-open", "half-open->closed"}, breakerDetails(r))
	assert.Len(t, ss, 2, "closed again: the rest go out together")
	for _, s := range ss {
		r.reply(s, OutcomeOK)
	}
	assert.Empty(t, r.messages("b"))
}

func TestBreakerHalfOpenFailureReopens(t *testing.T) {
	r := openBreaker(t)
	r.advance(60 * time.Second)
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.reply(ss[0], OutcomeTimeout)
	assert.Equal(t, []string{"closed->open", "open->half-open", "half-open->open"}, breakerDetails(r))
	assert.Equal(t, 2, r.eng.Counters().BreakerOpened)
	// The runtime's gauge and the simulator read the notes with
	// BreakerMovedTo: it must agree with what the engine writes.
	var moved []string
	for _, d := range breakerDetails(r) {
		to, ok := BreakerMovedTo(d)
		require.True(t, ok, d)
		moved = append(moved, to)
	}
	assert.Equal(t, []string{"open", "half-open", "open"}, moved)
	_, ok := BreakerMovedTo("open")
	assert.False(t, ok, "a detail without an arrow says nothing")

	r.advance(60*time.Second - time.Nanosecond)
	assert.Empty(t, r.takeSends())
	r.advance(time.Nanosecond)
	assert.Len(t, r.takeSends(), 1, "half-open again after another open period")
}

func TestBreakerIsPerBot(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxAttempts = 100; c.JitterFraction = 0; c.BreakerFailures = 2 })
	r.reg = Registry{
		Bots:        []Bot{{ID: "bad", HasKey: true}, {ID: "good", HasKey: true}},
		Memberships: []Membership{member("s", "bad", pos(0, 0)), member("s", "good", pos(0, 0))},
	}
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	for _, s := range r.takeSends() {
		if s.Bot == "bad" {
			r.reply(s, OutcomeRefused)
		} else {
			r.reply(s, OutcomeOK)
		}
	}
	require.Len(t, r.notesOf("breaker"), 1)
	assert.Equal(t, "bad", r.notesOf("breaker")[0].Bot)
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 1, "the healthy bot is not held back by the open one")
	assert.Equal(t, "good", ss[0].Bot)
}
