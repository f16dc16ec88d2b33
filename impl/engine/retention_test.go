package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTrimKeepsNewest(t *testing.T) {
	r := newRig(t, func(c *Config) { c.RetentionMax = 3 })
	oneBot(r, false)
	r.boot()
	// Enqueued a second apart, with ids deliberately out of arrival order.
	for i, id := range []string{"e5", "e1", "e4", "e2", "e3"} {
		r.clk.t = t0.Add(time.Duration(i) * time.Second)
		ev := logEvent("s", int64(i+1), 0)
		ev.ID = id
		r.step(batch("s", "c", ev))
	}
	r.advance(5 * time.Minute)
	got := r.messages("b")
	require.Len(t, got, 3)
	// The three most recently enqueued survive, whatever their ids.
	var ids []string
	for _, m := range got {
		ids = append(ids, m.EventID)
	}
	assert.Equal(t, []string{"e4", "e2", "e3"}, ids)
	caps := r.notesOf("retention-cap")
	require.Len(t, caps, 1)
	assert.Equal(t, 2, caps[0].Count)
	assert.Equal(t, 2, r.eng.Counters().RetentionCap)
}

func TestTTLDeletesOnlyExpired(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.RetentionTTL = time.Hour
		c.CleanupInterval = 10 * time.Minute
		c.ClockSkewBudget = 0
	})
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	r.advance(55 * time.Minute)
	r.step(batch("s", "c", logEvent("s", 2, 0)))

	r.advance(5 * time.Minute) // cleanup at exactly TTL after the first enqueue
	assert.Equal(t, []string{"s/1.0", "s/2.0"}, r.eventIDs("b"), "a message exactly TTL old is not yet expired")
	r.advance(10 * time.Minute)
	assert.Equal(t, []string{"s/2.0"}, r.eventIDs("b"))
	var dropped int
	for _, n := range r.notesOf("retention-ttl") {
		dropped += n.Count
	}
	assert.Equal(t, 1, dropped)
	assert.Equal(t, 1, r.eng.Counters().RetentionTTL)
	assert.Len(t, r.notesOf("retention-ttl"), 7, "every cleanup run is noted, even when it drops nothing")
}

func TestNoRetentionBug(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.RetentionTTL = time.Hour
		c.RetentionMax = 1
		c.CleanupInterval = 10 * time.Minute
		c.Bugs.NoRetention = true
	})
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 2, 0)))
	r.advance(3 * time.Hour)
	assert.Len(t, r.messages("b"), 2)
	assert.Empty(t, r.notesOf("retention-ttl"))
	assert.Empty(t, r.notesOf("retention-cap"))
}

// A cleaner whose clock runs ahead of the enqueuing node's must not shorten
// the TTL: the rule waits ClockSkewBudget longer.
func TestTTLWaitsForClockSkewBudget(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.RetentionTTL = time.Hour
		c.CleanupInterval = 10 * time.Minute
		c.ClockSkewBudget = 15 * time.Minute
	})
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	r.advance(70 * time.Minute) // past the TTL, inside TTL + budget
	assert.Equal(t, []string{"s/1.0"}, r.eventIDs("b"), "deleted inside the skew budget")
	r.advance(10 * time.Minute) // 80 min: past TTL + budget
	assert.Empty(t, r.eventIDs("b"), "not deleted after TTL + budget")
}
