package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnqueueErrorHoldsCursorAndRetries(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	for _, s := range r.takeSends() {
		r.reply(s, OutcomeOK)
	}

	r.st.failNext["Enqueue"] = 2
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	assert.Empty(t, r.takeSends())
	c, _ := r.cursor("s")
	assert.Equal(t, pos(1, 0), c.Pos, "the cursor must not pass an event that is not handed off")
	assert.Len(t, r.notesOf("store-error"), 1)

	// A newer batch queues behind the failed one (second failure).
	r.step(batch("s", "c3", logEvent("s", 3, 0)))
	c, _ = r.cursor("s")
	assert.Equal(t, pos(1, 0), c.Pos)
	assert.Equal(t, 2, r.eng.Counters().StoreErrors)

	r.advance(time.Second)
	assert.ElementsMatch(t, []string{"s/2.0", "s/3.0"}, sendIDs(r.takeSends()))
	c, _ = r.cursor("s")
	assert.Equal(t, pos(3, 0), c.Pos)
	assert.Equal(t, []byte("c3"), c.Token)
}

func TestAckErrorIsRetriedWithoutResend(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.st.failNext["Ack"] = 1
	r.reply(ss[0], OutcomeOK)
	assert.Len(t, r.messages("b"), 1)
	r.advance(time.Second)
	assert.Empty(t, r.messages("b"), "the ack is retried")
	assert.Empty(t, r.takeSends())
	assert.Equal(t, 1, r.eng.Counters().Acked)
}

func TestFailErrorIsRecordedWhenReclaimed(t *testing.T) {
	r := newRig(t, func(c *Config) { c.StoreRetry = time.Minute; c.JitterFraction = 0 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	ss := r.takeSends()
	r.st.failNext["Fail"] = 1
	r.reply(ss[0], OutcomeStatus)
	// The lease (30 s) lapses long before the store retry (1 min). When the
	// message is claimed again, the unrecorded failure is recorded instead
	// of sending it again with its attempt uncounted.
	r.advance(40 * time.Second)
	r.step(KeyPublished{Bot: "b"}) // pumps the bot
	assert.Empty(t, r.takeSends())
	ms := r.messages("b")
	require.Len(t, ms, 1)
	assert.Equal(t, 1, ms[0].Attempts, "the failed attempt was recorded")
	assert.Empty(t, ms[0].LeaseOwner)

	r.advance(time.Nanosecond) // its retry time (t0+1s) has long passed
	ss = r.takeSends()
	require.Len(t, ss, 1)
	assert.Equal(t, 2, ss[0].Attempt)
}

func TestClaimErrorRetries(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	r.st.failNext["Claim"] = 1
	r.step(KeyPublished{Bot: "b"})
	assert.Empty(t, r.takeSends())
	r.advance(time.Second)
	assert.Len(t, r.takeSends(), 1)
}

func TestBootErrorsRetry(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	// Leave one message due for retry, then restart into a failing store.
	r.reply(r.takeSends()[0], OutcomeStatus)
	r.st.failNext["ListCursors"] = 1
	r.st.failNext["ListMessages"] = 1
	rd := r.boot()
	assert.Empty(t, rd.Subscribes)
	assert.Len(t, rd.Notes, 2)
	r.advance(time.Second)
	require.Len(t, r.subs, 2)
	assert.Equal(t, pos(1, 0), r.subs[1].From)
	r.advance(time.Second)
	assert.Len(t, r.takeSends(), 1, "the retry scheduled before the restart still happens")
}

// A long Claim outage must not multiply the bot's store-error wake-ups:
// every pump that fails used to add its own retry instant, and each of
// those, failing again, re-added itself, so the retries per second grew
// with the number of pumps during the outage (FuzzWholeRun input
// 919e67d1: 130 events, 160k timer steps). One retry per StoreRetry is
// enough: any wake-up due sooner pumps the bot anyway.
func TestClaimOutageKeepsOneRetryPerBot(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CleanupInterval = time.Hour })
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	r.st.failNext["Claim"] = 1 << 30
	// Forty pumps at distinct instants during the outage.
	for i := 0; i < 40; i++ {
		r.step(KeyPublished{Bot: "b"})
		r.advance(137 * time.Millisecond)
	}
	before := r.st.failNext["Claim"]
	r.advance(10 * time.Second)
	claims := before - r.st.failNext["Claim"]
	// StoreRetry is 1 s: ten retries in ten seconds (one more if an
	// instant lands on the window's edge).
	assert.LessOrEqual(t, claims, 11, "claims in 10 s of outage")
	assert.GreaterOrEqual(t, claims, 9, "the bot still retries every StoreRetry")
	assert.LessOrEqual(t, len(r.timers), 2, "timers pending")

	r.st.failNext["Claim"] = 0
	r.advance(time.Second)
	assert.Len(t, r.takeSends(), 1, "delivered once the store answers")
}

// While the store keeps failing, a store retry makes one failed call, not
// one per pending write: with N acks pending, every retry used to call Ack
// N times for as long as the outage lasted (FuzzWholeRun input 0b20b1d1:
// 35 events per stream, an Ack outage of 78 min, 290k failed calls and
// 14 s of wall time in a 50k-step run). Every pending write still lands
// once the store answers.
func TestStoreRetryStopsAtTheFirstFailure(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CleanupInterval = time.Hour; c.MaxInFlightPerBot = 100 })
	oneBot(r, true)
	r.boot()
	var evs []Event
	for i := int64(1); i <= 20; i++ {
		evs = append(evs, logEvent("s", i, 0))
	}
	r.step(batch("s", "c", evs...))
	ss := r.takeSends()
	require.Len(t, ss, 20)
	r.st.failNext["Ack"] = 1 << 30
	for _, s := range ss {
		r.reply(s, OutcomeOK)
	}
	before := r.st.failNext["Ack"]
	r.advance(10 * time.Second)
	calls := before - r.st.failNext["Ack"]
	assert.LessOrEqual(t, calls, 11, "Ack calls in 10 s of outage with 20 acks pending")
	assert.GreaterOrEqual(t, calls, 9, "the store is still retried every StoreRetry")

	r.st.failNext["Ack"] = 0
	r.advance(time.Second)
	assert.Empty(t, r.messages("b"), "every pending ack landed")
	assert.Equal(t, 20, r.eng.Counters().Acked)
	assert.Empty(t, r.takeSends())
}
