package receiver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

var (
	t0     = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	secret = []byte("bot-secret")
	ctx    = context.Background()
)

func newRx(t *testing.T, cfg Config) *Receiver {
	t.Helper()
	if cfg.Secrets == nil {
		cfg.Secrets = [][]byte{secret}
	}
	r, err := New(cfg)
	require.NoError(t, err)
	return r
}

// counting returns a handler and the per-id call counts.
func counting() (HandlerFunc, map[string]int) {
	calls := map[string]int{}
	return func(_ context.Context, ev Event) error { calls[ev.ID]++; return nil }, calls
}

func signed(key []byte, id string, ts int64, body []byte) Request {
	return Request{Headers: webhook.NewHeaders(key, id, ts, body), Body: body}
}

// deliver sends one correctly signed request stamped at sentAt.
func deliver(r *Receiver, now, sentAt time.Time, id string, h HandlerFunc) Result {
	body := []byte("body of " + id)
	return r.Handle(ctx, now, signed(secret, id, sentAt.Unix(), body), h)
}

func TestHandlesOnceAndDropsDuplicates(t *testing.T) {
	r := newRx(t, Config{})
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
	r := newRx(t, Config{})
	h, calls := counting()
	body := []byte("payload")
	ts := t0.Unix()
	good := webhook.Sign(secret, "e", ts, body)
	with := func(sig string, body []byte) Request {
		return Request{Headers: webhook.Headers{ID: "e", Timestamp: strconv.FormatInt(ts, 10), Signature: sig}, Body: body}
	}
	for name, sig := range map[string]string{
		"other secret":  webhook.Sign([]byte("wrong"), "e", ts, body),
		"other id":      webhook.Sign(secret, "f", ts, body),
		"garbage":       "v1,AAAA",
		"no version":    good[3:],
		"truncated sig": good[:len(good)-2],
		"v2":            "v2," + good[3:],
	} {
		res := r.Handle(ctx, t0, with(sig, body), h)
		assert.Equal(t, Rejected, res.Outcome, name)
		assert.Equal(t, 401, res.Status, name)
		assert.ErrorIs(t, res.Err, webhook.ErrNoMatch, name)
	}
	res := r.Handle(ctx, t0, with("", body), h)
	assert.Equal(t, 400, res.Status, "an empty signature header is a missing header")
	assert.Equal(t, "missing required headers", res.Reason)
	res = r.Handle(ctx, t0, with(good, []byte("tampered")), h)
	assert.Equal(t, Rejected, res.Outcome, "tampered body")
	assert.Empty(t, calls)
	assert.Zero(t, r.Len(), "rejected requests do not enter the cache")

	// Several signatures (the sender rotating): any valid one is accepted.
	res = r.Handle(ctx, t0, with(webhook.Sign([]byte("old"), "e", ts, body)+" "+good, body), h)
	assert.Equal(t, Handled, res.Outcome)
	assert.Equal(t, 1, calls["e"])
}

// Several secrets on the receiver (the receiver rotating): a request signed
// with any one of them is accepted; removing a secret rejects its requests.
func TestSecretRotation(t *testing.T) {
	oldKey, newKey := []byte("old-key"), []byte("new-key")
	r := newRx(t, Config{Secrets: [][]byte{oldKey, newKey}})
	h, calls := counting()
	assert.Equal(t, Handled, r.Handle(ctx, t0, signed(oldKey, "a", t0.Unix(), nil), h).Outcome)
	assert.Equal(t, Handled, r.Handle(ctx, t0, signed(newKey, "b", t0.Unix(), nil), h).Outcome)
	after := newRx(t, Config{Secrets: [][]byte{newKey}})
	assert.Equal(t, Rejected, after.Handle(ctx, t0, signed(oldKey, "c", t0.Unix(), nil), h).Outcome)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, calls)
}

func TestParseSecretsWhsec(t *testing.T) {
	keys, err := ParseSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", webhook.FormatSecret([]byte("k2")))
	require.NoError(t, err)
	r := newRx(t, Config{Secrets: keys})
	h, calls := counting()
	// The specification's published example, received 10 s after signing.
	req := Request{Headers: webhook.Headers{ID: "msg_p5jXN8AQM9LWM0D4loKWxJek", Timestamp: "1614265330",
		Signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}, Body: []byte(`{"test": 2432232314}`)}
	assert.Equal(t, Handled, r.Handle(ctx, time.Unix(1614265340, 0), req, h).Outcome)
	assert.Equal(t, Handled, r.Handle(ctx, t0, signed([]byte("k2"), "x", t0.Unix(), nil), h).Outcome)
	assert.Len(t, calls, 2)

	_, err = ParseSecrets("whsec_not base64!")
	assert.ErrorContains(t, err, "secret 1")
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no secrets":   {},
		"empty secret": {Secrets: [][]byte{secret, {}}},
		"negative":     {Secrets: [][]byte{secret}, Tolerance: -time.Second},
	} {
		_, err := New(cfg)
		assert.Error(t, err, name)
	}
}

func TestTimestampTolerance(t *testing.T) {
	r := newRx(t, Config{}) // default tolerance: 300 s
	h, calls := counting()
	assert.Equal(t, Handled, deliver(r, t0, t0.Add(-300*time.Second), "edge-old", h).Outcome)
	assert.Equal(t, Handled, deliver(r, t0, t0.Add(300*time.Second), "edge-new", h).Outcome)

	res := deliver(r, t0, t0.Add(-301*time.Second), "stale", h)
	assert.Equal(t, Rejected, res.Outcome)
	assert.Equal(t, 400, res.Status)
	assert.ErrorIs(t, res.Err, webhook.ErrTooOld)
	res = deliver(r, t0, t0.Add(301*time.Second), "future", h)
	assert.Equal(t, Rejected, res.Outcome)
	assert.ErrorIs(t, res.Err, webhook.ErrTooNew)
	assert.Equal(t, map[string]int{"edge-old": 1, "edge-new": 1}, calls)

	tight := newRx(t, Config{Tolerance: 5 * time.Second})
	assert.Equal(t, Rejected, deliver(tight, t0, t0.Add(-6*time.Second), "x", h).Outcome)
}

// Defect 8: the tolerance is compared on full time. A timestamp 300 whole
// seconds before a now that has a fractional second is more than 300 s old
// (the old receiver compared truncated seconds and accepted it).
func TestToleranceOnFullTime(t *testing.T) {
	r := newRx(t, Config{})
	h, calls := counting()
	now := t0.Add(500 * time.Millisecond)
	res := deliver(r, now, t0.Add(-300*time.Second), "stale", h)
	assert.Equal(t, Rejected, res.Outcome)
	assert.ErrorIs(t, res.Err, webhook.ErrTooOld)
	// 300 s ahead of now's whole second is within: at - now = 299.5 s.
	assert.Equal(t, Handled, deliver(r, now, t0.Add(300*time.Second), "ahead", h).Outcome)
	// 301 s ahead of the whole second = 300.5 s ahead of now: too new.
	assert.Equal(t, Rejected, deliver(r, now, t0.Add(301*time.Second), "far", h).Outcome)
	assert.Equal(t, map[string]int{"ahead": 1}, calls)
}

// Defect 8, header parsing: the four inputs the old receiver decided
// differently from the reference library.
func TestHeaderParsingMatchesReference(t *testing.T) {
	body := []byte("b")
	ts := t0.Unix()
	good := webhook.Sign(secret, "e", ts, body)
	other := webhook.Sign([]byte("other"), "e", ts, body)
	for _, c := range []struct {
		name  string
		id    string
		sig   string
		want  Outcome
		cause error
	}{
		{"tab between signatures", "e", other + "\t" + good, Rejected, webhook.ErrNoMatch},
		{"v1,<sig>,extra", "e", good + ",extra", Handled, nil},
		{"empty webhook-id", "", webhook.Sign(secret, "", ts, body), Rejected, webhook.ErrMissingHeaders},
		{"trailing newline", "e", good + "\n", Rejected, webhook.ErrNoMatch},
		{"two spaces between", "e", other + "  " + good, Handled, nil},
	} {
		r := newRx(t, Config{})
		res := r.Handle(ctx, t0, Request{Headers: webhook.Headers{ID: c.id, Timestamp: strconv.FormatInt(ts, 10), Signature: c.sig}, Body: body}, nil)
		assert.Equal(t, c.want, res.Outcome, c.name)
		if c.cause != nil {
			assert.ErrorIs(t, res.Err, c.cause, c.name)
		}
	}
}

func TestHandlerFailureReleasesTheID(t *testing.T) {
	r := newRx(t, Config{})
	fail := true
	runs := 0
	h := func(context.Context, Event) error {
		runs++
		if fail {
			return errors.New("disk full")
		}
		return nil
	}
	res := deliver(r, t0, t0, "e", h)
	assert.Equal(t, Failed, res.Outcome)
	assert.Equal(t, 500, res.Status, "a failed handler asks the sender to retry")
	fail = false
	assert.Equal(t, Handled, deliver(r, t0, t0, "e", h).Outcome, "the retry runs the handler again")
	assert.Equal(t, Duplicate, deliver(r, t0, t0, "e", h).Outcome)
	assert.Equal(t, 2, runs)

	// A panicking handler releases too (and the panic goes on up).
	assert.Panics(t, func() {
		deliver(r, t0, t0, "p", func(context.Context, Event) error { panic("boom") })
	})
	assert.Equal(t, Handled, deliver(r, t0, t0, "p", h).Outcome)
}

func TestConcurrentDuplicateIsBusy(t *testing.T) {
	r := newRx(t, Config{})
	var inner Result
	outer := deliver(r, t0, t0, "e", func(context.Context, Event) error {
		inner = deliver(r, t0, t0, "e", nil)
		return nil
	})
	assert.Equal(t, Handled, outer.Outcome)
	assert.Equal(t, Busy, inner.Outcome)
	assert.Equal(t, 409, inner.Status, "not 2xx: the first attempt may still fail")
}

func TestDedupWindowInTime(t *testing.T) {
	r := newRx(t, Config{Window: time.Minute})
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
	r := newRx(t, Config{MaxEntries: 2})
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
	r := newRx(t, Config{MaxEntries: 100, Window: time.Hour})
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
	r := newRx(t, Config{NoDedup: true})
	h, calls := counting()
	for range 3 {
		assert.Equal(t, Handled, deliver(r, t0, t0, "e", h).Outcome)
	}
	assert.Equal(t, 3, calls["e"])
	// It still verifies.
	bad := Request{Headers: webhook.Headers{ID: "e", Timestamp: strconv.FormatInt(t0.Unix(), 10), Signature: "v1,bad"}}
	assert.Equal(t, Rejected, r.Handle(ctx, t0, bad, h).Outcome)
}

// fakeMarker is MarkProcessed over a map, with a switch to fail.
type fakeMarker struct {
	seen map[string]time.Time
	err  error
}

func (f *fakeMarker) MarkProcessed(_ context.Context, req impl.MarkRequest) (bool, error) {
	sub, id, now, window := req.Subscriber, req.EventID, req.Now, req.Window
	if f.err != nil {
		return false, f.err
	}
	k := sub + "/" + id
	if at, ok := f.seen[k]; ok && now.Sub(at) < window {
		return false, nil
	}
	f.seen[k] = now
	return true, nil
}

func TestStoreDedupSurvivesRestart(t *testing.T) {
	store := &fakeMarker{seen: map[string]time.Time{}}
	h, calls := counting()
	first := newRx(t, Config{Dedup: NewStoreDedup(store, "bot-1", time.Hour)})
	assert.Equal(t, Handled, deliver(first, t0, t0, "e", h).Outcome)
	// A new process (empty memory) sharing the store still sees the id.
	second := newRx(t, Config{Dedup: NewStoreDedup(store, "bot-1", time.Hour)})
	assert.Equal(t, Duplicate, deliver(second, t0.Add(time.Second), t0, "e", h).Outcome)
	assert.Equal(t, 1, calls["e"])

	// A failed handler releases in-process; the retry runs again.
	fails := 1
	hf := func(context.Context, Event) error {
		if fails > 0 {
			fails--
			return errors.New("transient")
		}
		return nil
	}
	assert.Equal(t, Failed, deliver(second, t0, t0, "f", hf).Outcome)
	assert.Equal(t, Handled, deliver(second, t0, t0, "f", hf).Outcome)
	assert.Equal(t, Duplicate, deliver(second, t0, t0, "f", hf).Outcome)

	store.err = errors.New("connection refused")
	res := deliver(second, t0, t0, "g", h)
	assert.Equal(t, Unavailable, res.Outcome)
	assert.Equal(t, 503, res.Status)
	assert.Zero(t, calls["g"])
}

// SetSecrets rotates a live receiver's keys and keeps its dedup memory: an
// id handled under the old key is still a duplicate after the rotation.
func TestSetSecretsRotatesInPlace(t *testing.T) {
	oldKey, newKey := []byte("old-key"), []byte("new-key")
	r := newRx(t, Config{Secrets: [][]byte{oldKey}})
	h, calls := counting()
	assert.Equal(t, Handled, r.Handle(ctx, t0, signed(oldKey, "a", t0.Unix(), nil), h).Outcome)
	assert.Equal(t, Rejected, r.Handle(ctx, t0, signed(newKey, "b", t0.Unix(), nil), h).Outcome)
	require.NoError(t, r.SetSecrets([][]byte{oldKey, newKey}))
	assert.Equal(t, Handled, r.Handle(ctx, t0, signed(newKey, "b", t0.Unix(), nil), h).Outcome)
	require.NoError(t, r.SetSecrets([][]byte{newKey}))
	assert.Equal(t, Rejected, r.Handle(ctx, t0, signed(oldKey, "c", t0.Unix(), nil), h).Outcome)
	assert.Equal(t, Duplicate, r.Handle(ctx, t0, signed(newKey, "a", t0.Unix(), nil), h).Outcome, "the rotation kept the dedup memory")
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, calls)
	assert.Error(t, r.SetSecrets(nil))
	assert.Error(t, r.SetSecrets([][]byte{{}}))
	assert.Equal(t, Handled, r.Handle(ctx, t0, signed(newKey, "d", t0.Unix(), nil), h).Outcome, "a refused SetSecrets changed nothing")
}
