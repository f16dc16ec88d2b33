package receiver

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl/engine"
)

var (
	t0     = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	secret = []byte("bot-secret")
)

// counting returns a handler and the per-id call counts.
func counting() (func(string, []byte), map[string]int) {
	calls := map[string]int{}
	return func(id string, _ []byte) { calls[id]++ }, calls
}

// deliver sends one correctly signed request stamped at sentAt.
func deliver(r *Receiver, now, sentAt time.Time, id string, h func(string, []byte)) Result {
	body := []byte("body of " + id)
	ts := sentAt.Unix()
	return r.Handle(now, id, ts, engine.Sign(secret, id, ts, body), body, h)
}

func TestHandlesOnceAndDropsDuplicates(t *testing.T) {
	r := New(Config{Secret: secret})
	h, calls := counting()
	res := deliver(r, t0, t0, "e1", h)
	assert.Equal(t, Result{Outcome: Handled, Status: 200}, res)
	res = deliver(r, t0.Add(time.Second), t0.Add(time.Second), "e1", h)
	assert.Equal(t, Duplicate, res.Outcome)
	assert.Equal(t, 200, res.Status, "a duplicate is acknowledged so the sender stops retrying")
	deliver(r, t0, t0, "e2", h)
	assert.Equal(t, map[string]int{"e1": 1, "e2": 1}, calls)
}

func TestRejectsBadSignatures(t *testing.T) {
	r := New(Config{Secret: secret})
	h, calls := counting()
	body := []byte("payload")
	ts := t0.Unix()
	good := engine.Sign(secret, "e", ts, body)

	for name, sig := range map[string]string{
		"other secret":  engine.Sign([]byte("wrong"), "e", ts, body),
		"other id":      engine.Sign(secret, "f", ts, body),
		"empty":         "",
		"garbage":       "v1,AAAA",
		"no version":    good[3:],
		"truncated sig": good[:len(good)-2],
	} {
		res := r.Handle(t0, "e", ts, sig, body, h)
		assert.Equal(t, Rejected, res.Outcome, name)
		assert.Equal(t, 401, res.Status, name)
	}
	res := r.Handle(t0, "e", ts, good, []byte("tampered"), h)
	assert.Equal(t, Rejected, res.Outcome, "tampered body")
	assert.Empty(t, calls)
	assert.Zero(t, r.Len(), "rejected requests do not enter the cache")

	// Several signatures (secret rotation): any valid one is accepted.
	res = r.Handle(t0, "e", ts, engine.Sign([]byte("old"), "e", ts, body)+" "+good, body, h)
	assert.Equal(t, Handled, res.Outcome)
	assert.Equal(t, 1, calls["e"])
}

func TestTimestampTolerance(t *testing.T) {
	r := New(Config{Secret: secret}) // default tolerance: 300 s
	h, calls := counting()
	assert.Equal(t, Handled, deliver(r, t0, t0.Add(-300*time.Second), "edge-old", h).Outcome)
	assert.Equal(t, Handled, deliver(r, t0, t0.Add(300*time.Second), "edge-new", h).Outcome)

	res := deliver(r, t0, t0.Add(-301*time.Second), "stale", h)
	assert.Equal(t, Rejected, res.Outcome)
	assert.Equal(t, 400, res.Status)
	assert.Contains(t, res.Reason, "old")
	res = deliver(r, t0, t0.Add(301*time.Second), "future", h)
	assert.Equal(t, Rejected, res.Outcome)
	assert.Contains(t, res.Reason, "future")
	assert.Equal(t, map[string]int{"edge-old": 1, "edge-new": 1}, calls)

	tight := New(Config{Secret: secret, Tolerance: 5 * time.Second})
	assert.Equal(t, Rejected, deliver(tight, t0, t0.Add(-6*time.Second), "x", h).Outcome)
}

func TestDedupWindowInTime(t *testing.T) {
	r := New(Config{Secret: secret, Window: time.Minute})
	h, calls := counting()
	deliver(r, t0, t0, "e", h)
	// A duplicate inside the window does not refresh the entry.
	assert.Equal(t, Duplicate, deliver(r, t0.Add(30*time.Second), t0.Add(30*time.Second), "e", h).Outcome)
	assert.Equal(t, Duplicate, deliver(r, t0.Add(time.Minute-time.Nanosecond), t0.Add(time.Minute), "e", h).Outcome)
	// At the window's end the id is forgotten: a replay this late runs the
	// handler again (the beyond-window duplicate a checker must report).
	assert.Equal(t, Handled, deliver(r, t0.Add(time.Minute), t0.Add(time.Minute), "e", h).Outcome)
	assert.Equal(t, 2, calls["e"])
	assert.Equal(t, 1, r.Len())
}

func TestDedupBoundedInSizeEvictsOldest(t *testing.T) {
	r := New(Config{Secret: secret, MaxEntries: 2})
	h, calls := counting()
	now := t0
	next := func(id string) Outcome {
		now = now.Add(time.Second)
		return deliver(r, now, now, id, h).Outcome
	}
	assert.Equal(t, Handled, next("a"))
	assert.Equal(t, Handled, next("b"))
	assert.Equal(t, Handled, next("c")) // evicts a, the oldest
	assert.Equal(t, 2, r.Len())
	assert.Equal(t, Duplicate, next("b"))
	assert.Equal(t, Duplicate, next("c"))
	assert.Equal(t, Handled, next("a")) // forgotten: handled again; evicts b
	assert.Equal(t, Handled, next("b")) // evicts c
	assert.Equal(t, Duplicate, next("a"))
	assert.Equal(t, map[string]int{"a": 2, "b": 2, "c": 1}, calls)
}

func TestManyEntriesStayBounded(t *testing.T) {
	r := New(Config{Secret: secret, MaxEntries: 100, Window: time.Hour})
	h, calls := counting()
	for i := range 1000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		require.Equal(t, Handled, deliver(r, now, now, fmt.Sprint(i), h).Outcome)
		require.LessOrEqual(t, r.Len(), 100)
	}
	now := t0.Add(time.Second)
	// The newest 100 are remembered, older ones are not.
	assert.Equal(t, Duplicate, deliver(r, now, now, "999", h).Outcome)
	assert.Equal(t, Duplicate, deliver(r, now, now, "900", h).Outcome)
	assert.Equal(t, Handled, deliver(r, now, now, "899", h).Outcome)
	assert.Equal(t, 2, calls["899"])
	assert.Equal(t, 1, calls["999"])
}

func TestNoDedupRunsHandlerEveryTime(t *testing.T) {
	r := New(Config{Secret: secret, NoDedup: true})
	h, calls := counting()
	for range 3 {
		assert.Equal(t, Handled, deliver(r, t0, t0, "e", h).Outcome)
	}
	assert.Equal(t, 3, calls["e"])
	// It still verifies.
	assert.Equal(t, Rejected, r.Handle(t0, "e", t0.Unix(), "v1,bad", nil, h).Outcome)
}

func TestEngineSendVerifies(t *testing.T) {
	// A request exactly as the engine builds it passes the receiver.
	body := []byte(`{"hello":"bot"}`)
	ts := t0.Unix()
	s := engine.Send{EventID: "evt-1", Timestamp: ts, Body: body, Signature: engine.Sign(secret, "evt-1", ts, body)}
	r := New(Config{Secret: secret})
	got := ""
	res := r.Handle(t0.Add(2*time.Second), s.EventID, s.Timestamp, s.Signature, s.Body, func(id string, b []byte) { got = id + ":" + string(b) })
	assert.Equal(t, Handled, res.Outcome)
	assert.Equal(t, `evt-1:{"hello":"bot"}`, got)
}
