package engine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

// oneBot registers bot "b" (with or without its key) as a member of log
// stream "s" from the beginning.
func oneBot(r *rig, hasKey bool) {
	r.reg = Registry{
		Bots:        []Bot{{ID: "b", Secret: []byte("secret-b"), HasKey: hasKey}},
		Memberships: []Membership{member("s", "b", impl.Position{})},
	}
}

func TestQueueFlushOnKeyPublication(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 2, 0)))

	assert.Empty(t, r.takeSends(), "no key: nothing may be sent")
	assert.Equal(t, []string{"s/1.0", "s/1.1", "s/2.0"}, r.eventIDs("b"))
	assert.Equal(t, 3, r.eng.Counters().Enqueued)

	r.step(KeyPublished{Bot: "b"})
	sends := r.takeSends()
	require.Len(t, sends, 3)
	assert.ElementsMatch(t, []string{"s/1.0", "s/1.1", "s/2.0"}, sendIDs(sends))
	for _, s := range sends {
		assert.Equal(t, webhook.Sign([]byte("secret-b"), s.EventID, s.Timestamp, s.Body), s.Signature)
		assert.Equal(t, "payload of "+s.EventID, string(s.Body))
		assert.Equal(t, t0.Unix(), s.Timestamp)
		assert.Equal(t, 2*time.Second, s.Timeout)
		assert.Equal(t, 1, s.Attempt)
	}
	// Sent but not answered: still queued (leased).
	for _, m := range r.messages("b") {
		assert.Equal(t, "node-1", m.LeaseOwner)
	}
	require.Len(t, r.messages("b"), 3)

	for _, s := range sends {
		r.reply(s, OutcomeOK)
	}
	assert.Empty(t, r.messages("b"), "acked after 2xx")
	assert.Equal(t, 3, r.eng.Counters().Acked)
	assert.Len(t, r.notesOf("acked"), 3)
}

func TestSendNowWhenBotHasKeyAndInFlightLimit(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxInFlightPerBot = 2 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 1, 2), logEvent("s", 1, 3), logEvent("s", 1, 4)))
	sends := r.takeSends()
	require.Len(t, sends, 2, "only MaxInFlightPerBot requests at once")

	// Answering refills; all five are delivered exactly once.
	delivered := map[string]int{}
	for len(sends) > 0 {
		s := sends[0]
		sends = sends[1:]
		delivered[s.EventID]++
		r.reply(s, OutcomeOK)
		sends = append(sends, r.takeSends()...)
		assert.LessOrEqual(t, len(sends), 2)
	}
	assert.Len(t, delivered, 5)
	for id, n := range delivered {
		assert.Equal(t, 1, n, id)
	}
	assert.Empty(t, r.messages("b"))
}

func TestRetryBackoffWithSeededJitter(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Rand = rand.New(rand.NewPCG(7, 9)) })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	s1 := r.takeSends()
	require.Len(t, s1, 1)
	r.reply(s1[0], OutcomeStatus)

	// The engine's first jitter draw is the first Float64 of its Rand.
	want := t0.Add(Backoff(r.cfg, 1, rand.New(rand.NewPCG(7, 9)).Float64()))
	ms := r.messages("b")
	require.Len(t, ms, 1, "a failure must not delete the message")
	assert.Equal(t, want, ms[0].NextAttemptAt)
	assert.False(t, ms[0].NextAttemptAt.Before(t0.Add(time.Second)))
	assert.True(t, ms[0].NextAttemptAt.Before(t0.Add(1300*time.Millisecond)))
	assert.Equal(t, 1, ms[0].Attempts)
	assert.Equal(t, "status 503", ms[0].LastError)

	// Not before it is due...
	r.advance(want.Sub(r.clk.t) - time.Nanosecond)
	assert.Empty(t, r.takeSends())
	// ...and exactly then.
	r.advance(time.Nanosecond)
	s2 := r.takeSends()
	require.Len(t, s2, 1)
	assert.Equal(t, want, r.clk.t)
	assert.Equal(t, 2, s2[0].Attempt)
	assert.Equal(t, s1[0].EventID, s2[0].EventID, "webhook-id is stable across retries")
	assert.NotEqual(t, s1[0].RequestID, s2[0].RequestID)
}

func TestTimeoutIsRetriedAsDuplicate(t *testing.T) {
	r := newRig(t, func(c *Config) { c.JitterFraction = 0 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	s1 := r.takeSends()
	require.Len(t, s1, 1)
	r.reply(s1[0], OutcomeTimeout) // the bot may well have processed it
	r.advance(time.Second)
	s2 := r.takeSends()
	require.Len(t, s2, 1)
	assert.Equal(t, s1[0].EventID, s2[0].EventID)
	assert.Equal(t, s1[0].Body, s2[0].Body)
	r.reply(s2[0], OutcomeOK)
	assert.Empty(t, r.messages("b"))
}

func TestRetryThenDeadLetterThenRequeue(t *testing.T) {
	r := newRig(t, func(c *Config) { c.JitterFraction = 0 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))

	first := r.takeSends()
	require.Len(t, first, 1)
	attempts := []int{first[0].Attempt}
	r.reply(first[0], OutcomeRefused)
	for range 5 {
		r.advance(time.Minute) // longer than any of the backoffs
		for _, s := range r.takeSends() {
			attempts = append(attempts, s.Attempt)
			r.reply(s, OutcomeRefused)
		}
	}
	assert.Equal(t, []int{1, 2, 3}, attempts, "exactly MaxAttempts attempts")
	require.Len(t, r.notesOf("dead"), 1)

	ms := r.messages("b")
	require.Len(t, ms, 1, "dead letters stay in the store")
	assert.True(t, ms[0].Dead)
	assert.Equal(t, 3, ms[0].Attempts)
	c := r.eng.Counters()
	assert.Equal(t, 3, c.Sent)
	assert.Equal(t, 3, c.Failed)
	assert.Equal(t, 1, c.DeadLettered)
	dead := r.notesOf("dead")[0]
	assert.Equal(t, "b", dead.Bot)
	assert.Equal(t, "s/1.0", dead.EventID)

	r.advance(24 * time.Hour)
	assert.Empty(t, r.takeSends(), "a dead letter is never attempted again by itself")

	r.step(RequeueDead{Key: impl.MessageKey{Subscriber: "b", EventID: "s/1.0"}})
	ss := r.takeSends()
	require.Len(t, ss, 1, "requeue sends at once")
	assert.Equal(t, 1, ss[0].Attempt, "requeue restarts the attempt count")
	assert.Len(t, r.notesOf("requeued"), 1)
	assert.Equal(t, 1, r.eng.Counters().Requeued)
	r.reply(ss[0], OutcomeOK)
	assert.Empty(t, r.messages("b"))

	// Requeueing something that is not dead changes nothing.
	r.step(RequeueDead{Key: impl.MessageKey{Subscriber: "b", EventID: "s/1.0"}})
	assert.Empty(t, r.takeSends())
	assert.Equal(t, 1, r.eng.Counters().Requeued)
}

func TestRetriesHappenAfterRestart(t *testing.T) {
	r := newRig(t, func(c *Config) { c.JitterFraction = 0; c.InitialBackoff = 10 * time.Second; c.MaxBackoff = time.Minute })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.reply(ss[0], OutcomeStatus) // retry due at t0+10s

	r.advance(2 * time.Second)
	r.boot() // restart: memory lost, store kept
	assert.Empty(t, r.takeSends(), "not due yet")
	r.advance(8*time.Second - time.Nanosecond)
	assert.Empty(t, r.takeSends())
	r.advance(time.Nanosecond)
	ss = r.takeSends()
	require.Len(t, ss, 1, "the new engine learned the retry time from the store")
	assert.Equal(t, 2, ss[0].Attempt)
}

func TestPoisonMessageDoesNotBlockOthers(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxInFlightPerBot = 1; c.JitterFraction = 0; c.BreakerFailures = 100 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 1, 2)))
	delivered := map[string]bool{}
	for range 50 {
		for _, s := range r.takeSends() {
			if s.EventID == "s/1.0" {
				r.reply(s, OutcomeStatus) // poison
			} else {
				delivered[s.EventID] = true
				r.reply(s, OutcomeOK)
			}
		}
		r.advance(100 * time.Millisecond)
	}
	assert.True(t, delivered["s/1.1"] && delivered["s/1.2"], "others are delivered while the poison message waits for its retry")
	assert.Len(t, r.notesOf("dead"), 1)
}
