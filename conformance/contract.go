package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model"
)

// The Contract group: one fixed script per rule of impl.Store, with the
// expected values worked out by hand from the contract's text (not from the
// model, so a mistake in one does not hide in the other).

// t0 is far from the Unix epoch: impl.NanosOf maps the zero time to 0, and
// the suite never wants a real instant to collide with "unset".
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const sec = time.Second

// client wraps a store so each call fails the check on error, and
// remembers each call with its result for the failure text (callTB).
type client struct {
	t   testing.TB
	st  impl.Store
	ctx context.Context
	log *callLog
}

func newClient(t testing.TB, f Factory) client {
	log := &callLog{}
	return client{t: callTB{TB: t, log: log}, st: f.New(t), ctx: context.Background(), log: log}
}

func showMessages(ms []impl.Message) string {
	if len(ms) == 0 {
		return "[]"
	}
	return show(keys(ms))
}

func (c client) get(stream, sub string) (impl.Cursor, bool) {
	c.t.Helper()
	cur, ok, err := c.st.GetCursor(c.ctx, impl.CursorKey{Stream: stream, Subscriber: sub})
	c.log.set("GetCursor(%q/%q) -> %v %s%s", stream, sub, ok, model.FormatCursor(cur), errNote(err))
	noErr(c.t, err, "GetCursor")
	return cur, ok
}

func (c client) cursors() []impl.Cursor {
	c.t.Helper()
	cs, err := c.st.ListCursors(c.ctx)
	c.log.set("ListCursors() -> %d cursors%s", len(cs), errNote(err))
	noErr(c.t, err, "ListCursors")
	return cs
}

func (c client) advance(cs ...impl.Cursor) []bool {
	c.t.Helper()
	w, err := c.st.AdvanceCursors(c.ctx, cs)
	c.log.set("AdvanceCursors(%s) -> %v%s", show(cs), w, errNote(err))
	noErr(c.t, err, "AdvanceCursors")
	length(c.t, w, len(cs), "AdvanceCursors must return one bool per cursor")
	return w
}

func (c client) enqueue(msgs ...impl.Message) int {
	c.t.Helper()
	n, err := c.st.Enqueue(c.ctx, msgs)
	c.log.set("Enqueue(%s) -> %d%s", showMessages(msgs), n, errNote(err))
	noErr(c.t, err, "Enqueue")
	return n
}

func (c client) claim(sub, owner string, now time.Time, lease time.Duration, limit int) []impl.Message {
	c.t.Helper()
	ms, err := c.st.Claim(c.ctx, impl.ClaimRequest{Subscriber: sub, Owner: owner, Now: now, Lease: lease, Limit: limit})
	c.log.set("Claim(subscriber %q, owner %q, now %s, lease %v, limit %d) -> %s%s", sub, owner, showTime(now), lease, limit, showMessages(ms), errNote(err))
	noErr(c.t, err, "Claim")
	return ms
}

func (c client) ack(keys ...impl.MessageKey) int {
	c.t.Helper()
	n, err := c.st.Ack(c.ctx, keys)
	c.log.set("Ack(%s) -> %d%s", show(keys), n, errNote(err))
	noErr(c.t, err, "Ack")
	return n
}

func (c client) fail(k impl.MessageKey, owner string, next time.Time, max int, reason string) (impl.Message, bool) {
	c.t.Helper()
	m, ok, err := c.st.Fail(c.ctx, impl.FailRequest{Key: k, Owner: owner, NextAttempt: next, MaxAttempts: max, Reason: reason})
	c.log.set("Fail(%s, owner %q, next attempt %s, max attempts %d, reason %q) -> %v %s%s", showKey(k), owner, showTime(next), max, reason, ok, model.FormatMessage(m), errNote(err))
	noErr(c.t, err, "Fail")
	return m, ok
}

func (c client) requeue(k impl.MessageKey, now time.Time) bool {
	c.t.Helper()
	ok, err := c.st.Requeue(c.ctx, k, now)
	c.log.set("Requeue(%s, now %s) -> %v%s", showKey(k), showTime(now), ok, errNote(err))
	noErr(c.t, err, "Requeue")
	return ok
}

func (c client) list(sub string) []impl.Message {
	c.t.Helper()
	ms, err := c.st.ListMessages(c.ctx, sub)
	c.log.set("ListMessages(%q) -> %d messages%s", sub, len(ms), errNote(err))
	noErr(c.t, err, "ListMessages")
	return ms
}

func (c client) expire(cutoff, now time.Time) int {
	c.t.Helper()
	n, err := c.st.DeleteExpired(c.ctx, cutoff, now)
	c.log.set("DeleteExpired(cutoff %s, now %s) -> %d%s", showTime(cutoff), showTime(now), n, errNote(err))
	noErr(c.t, err, "DeleteExpired")
	return n
}

func (c client) trim(max int, now time.Time) int {
	c.t.Helper()
	n, err := c.st.TrimPerSubscriber(c.ctx, max, now)
	c.log.set("TrimPerSubscriber(max %d, now %s) -> %d%s", max, showTime(now), n, errNote(err))
	noErr(c.t, err, "TrimPerSubscriber")
	return n
}

func (c client) delivered(app, source string) []impl.DeliveredItem {
	c.t.Helper()
	items, err := c.st.GetDelivered(c.ctx, app, source)
	c.log.set("GetDelivered(%q, %q) -> %+v%s", app, source, items, errNote(err))
	noErr(c.t, err, "GetDelivered")
	if len(items) == 0 {
		return nil
	}
	return items
}

func (c client) record(app, source string, items []impl.DeliveredItem, deleted ...string) {
	c.t.Helper()
	err := c.st.RecordDelivered(c.ctx, app, source, items, deleted)
	c.log.set("RecordDelivered(%q, %q, items %+v, deleted %q) -> %s", app, source, items, deleted, errNote(err))
	noErr(c.t, err, "RecordDelivered")
}

func (c client) mark(sub, ev string, now time.Time, window time.Duration) bool {
	c.t.Helper()
	ok, err := c.st.MarkProcessed(c.ctx, impl.MarkRequest{Subscriber: sub, EventID: ev, Now: now, Window: window})
	c.log.set("MarkProcessed(%q, %q, now %s, window %v) -> %v%s", sub, ev, showTime(now), window, ok, errNote(err))
	noErr(c.t, err, "MarkProcessed")
	return ok
}

// keys lists the (subscriber, event) keys of ms in order: most message
// assertions are about which messages, in which order.
func keys(ms []impl.Message) []impl.MessageKey {
	out := []impl.MessageKey{}
	for _, m := range ms {
		out = append(out, m.Key())
	}
	return out
}

func key(sub, ev string) impl.MessageKey { return impl.MessageKey{Subscriber: sub, EventID: ev} }

func cursor(stream, sub string, major, minor int64, id string, token string, updated time.Time) impl.Cursor {
	return impl.Cursor{
		Key:       impl.CursorKey{Stream: stream, Subscriber: sub},
		Pos:       impl.Position{Major: major, Minor: minor, ID: id},
		Token:     []byte(token),
		UpdatedAt: updated,
	}
}

func msg(sub, ev string, created time.Time) impl.Message {
	return impl.Message{
		Subscriber: sub,
		EventID:    ev,
		Stream:     "stream-1",
		Pos:        impl.Position{Major: 7, Minor: int64(len(ev)), ID: ev},
		Payload:    []byte("payload " + sub + "/" + ev),
		CreatedAt:  created,
	}
}

// queued is m as Enqueue must store it.
func queued(m impl.Message) impl.Message {
	return impl.Message{
		Subscriber:    m.Subscriber,
		EventID:       m.EventID,
		Stream:        m.Stream,
		Pos:           m.Pos,
		Payload:       m.Payload,
		CreatedAt:     model.NormTime(m.CreatedAt),
		NextAttemptAt: model.NormTime(m.CreatedAt),
	}
}

// sameMessages compares messages field by field with ==, except that an
// empty payload equals a nil one.
func sameMessages(t testing.TB, want, got []impl.Message, what string) {
	t.Helper()
	norm := func(ms []impl.Message) []impl.Message {
		out := []impl.Message{}
		for _, m := range ms {
			m.Payload = model.NormBytes(m.Payload)
			out = append(out, m)
		}
		return out
	}
	eq(t, norm(want), norm(got), "%s", what)
}

func sameMessage(t testing.TB, want, got impl.Message, what string) {
	t.Helper()
	sameMessages(t, []impl.Message{want}, []impl.Message{got}, what)
}

// contract makes a Contract check; rule is the sentence of impl/store.go it
// enforces, word for word (TestEveryCheckNamesItsRule holds it to that).
func contract(name, rule string, run func(t testing.TB, c client)) check {
	return check{
		group: GroupContract,
		name:  name,
		rule:  rule,
		skip: func(f Factory) string {
			if f.Features.AmbiguousErrors {
				return "the backend declares AmbiguousErrors: a fixed script cannot tell a fault from a bug; certify the fault-free backend's Contract group instead"
			}
			return ""
		},
		run: func(t testing.TB, f Factory, _ *settings) {
			c := newClient(t, f)
			run(c.t, c)
		},
	}
}

func contractChecks() []check {
	cs := []check{
		contract("CursorAbsent", "GetCursor returns the cursor stored under key, and false if there is none.", checkCursorAbsent),
		contract("CursorRoundTrip", "GetCursor returns the cursor stored under key, and false if there is none.", checkCursorRoundTrip),
		contract("CursorRejectsLowerOrEqual", "AdvanceCursors writes each cursor only if its Pos is strictly greater than the stored one's (or none is stored)", checkCursorRejectsLowerOrEqual),
		contract("CursorSameStreamWrittenTwice", "a conditional upsert, never a blind one, so a cursor cannot regress even under concurrent writers.", checkCursorSameStreamWrittenTwice),
		contract("CursorBatchSameKey", "Within one call the cursors are applied in order, so a later entry for the same key sees the earlier one.", checkCursorBatchSameKey),
		contract("CursorTimestampPositions", "Timestamp cursors (seed 004) use Major = created_at (Unix milliseconds), Minor = 0 and ID = the event id, compared lexicographically as the tie-break.", checkCursorTimestampPositions),
		contract("CursorListSorted", "ListCursors returns every stored cursor, sorted by key (Stream, then Subscriber, each compared bytewise as Go compares strings, never by a locale's collation).", checkCursorListSorted),
		contract("EnqueueDefaults", "Only Subscriber, EventID, Stream, Pos, Payload and CreatedAt are read from the input; NextAttemptAt starts at CreatedAt, Attempts at 0.", checkEnqueueDefaults),
		contract("EnqueueIdempotent", "Enqueue inserts messages, idempotent on (Subscriber, EventID): a message whose key is already present (queued, leased or dead) is left untouched.", checkEnqueueIdempotent),
		contract("EnqueueAfterAckInsertsAgain", "A key that was acked or purged is absent again, so enqueueing it again inserts it.", checkEnqueueAfterAck),
		contract("ListMessagesQueueOrder", "ListMessages returns the messages of one subscriber (\"\" = all), in QueueOrder, including leased and dead ones", checkListQueueOrder),
		contract("ClaimDueInQueueOrder", "Claim leases up to req.Limit due messages: not dead, NextAttemptAt <= req.Now, and no active lease (LeaseUntil <= req.Now).", checkClaimDueInQueueOrder),
		contract("ClaimSubscriberFilter", "If req.Subscriber is set only that subscriber's messages are considered.", checkClaimSubscriberFilter),
		contract("ClaimLeaseExpiry", "Each claimed message gets LeaseOwner = req.Owner and LeaseUntil = req.Now + req.Lease; the returned copies show the new lease.", checkClaimLeaseExpiry),
		contract("AckDeletesWhoeverHoldsIt", "The lease is not checked: a delivered message is done, whoever holds it now.", checkAck),
		contract("FailRetriesThenDead", "When Attempts reaches req.MaxAttempts the message becomes dead instead of due again. A Fail that makes a message dead still sets NextAttemptAt to req.NextAttempt, like every other recorded Fail", checkFailRetriesThenDead),
		contract("FailStaleIgnored", "false (no error) if the key is absent or its lease is held by someone else (the failure is stale and ignored).", checkFailStale),
		contract("Requeue", "Requeue makes a dead message live again with Attempts = 0 and NextAttemptAt = now. Requeue keeps LastError (why the message died) and every other field: the message stays the one row it was.", checkRequeue),
		contract("DeleteExpiredBoundary", "DeleteExpired deletes messages with CreatedAt < cutoff, except those under an active lease (LeaseUntil > now): a message being delivered is never purged.", checkDeleteExpired),
		contract("TrimKeepsNewest", "TrimPerSubscriber keeps at most max messages per subscriber, deleting the oldest (by CreatedAt, then EventID) first;", checkTrimKeepsNewest),
		contract("TrimAcrossStreams", "TrimPerSubscriber keeps at most max messages per subscriber, deleting the oldest (by CreatedAt, then EventID) first;", checkTrimAcrossStreams),
		contract("ManyEqualCreatedAt", "ListMessages returns the messages of one subscriber (\"\" = all), in QueueOrder, including leased and dead ones, however many there are and however many share a CreatedAt.", checkManyEqualCreatedAt),
		contract("TrimNeverDeletesLeased", "messages under an active lease are never deleted but do count toward the cap.", checkTrimLeased),
		contract("DeliveredUpsertDelete", "RecordDelivered upserts items (setting their version) and removes the ids in deleted, atomically.", checkDelivered),
		contract("MarkProcessedWindow", "A duplicate within the window returns false and does not refresh the entry.", checkMarkProcessed),
		contract("TimesNormalised", "every instant a backend returns is impl.TimeOf(impl.NanosOf(t)) of the one written (UTC, nanoseconds intact, no monotonic reading)", checkTimesNormalised),
		contract("NoAliasing", "a backend keeps no reference to the former and returns copies of its state, so mutating either never changes what is stored.", checkNoAliasing),
		contract("CancelledContextRefused", "a call whose context is already done returns an error and takes no effect;", checkCancelledContext),
		contract("ClosedStoreRefuses", "after Close every method returns an error;", checkClosed),
	}
	// Capabilities runs for every backend, fault-injecting ones included: a
	// capability lost in a wrapper must fail the suite, never skip a check.
	caps := check{group: GroupContract, name: "Capabilities", rule: "a declared capability that is not discoverable fails the suite, as does one the Unwrap chain has below a layer that drops it.",
		skip: func(Factory) string { return "" }, run: func(t testing.TB, f Factory, _ *settings) {
			checkCapabilities(t, f.Features, f.New(t))
		}}
	leased := capContract("EnqueueLeased", "EnqueueLeased is Enqueue, except that a message whose LeaseOwner is set is inserted already leased", CapLeasedEnqueue, checkEnqueueLeased)
	handOff := capContract("WriteHandOff", "WriteHandOff is, as one atomic call, Ack(w.Ack), then EnqueueLeased(w.Enqueue), then AdvanceCursors(w.Cursors), each with exactly its own results (HandOffResult), and each step seeing the ones before it", CapHandOff, checkHandOffWrite)
	cs = append([]check{caps}, append(cs, leased, handOff)...)
	blind := capContract("BlindCursorWrite", "an unconditional upsert (INSERT ... ON CONFLICT DO UPDATE) with no monotonic guard.", CapBlindCursor, checkBlindCursorWrite)
	return append(cs, blind)
}

// capContract is a Contract check of an optional capability: it runs
// when the store offers the capability, declared or not, unless the
// Factory opts out.
func capContract(name, rule string, c Capability, run func(t testing.TB, c client)) check {
	ch := contract(name, rule, func(t testing.TB, cl client) {
		needCapability(t, cl.st, c)
		run(t, cl)
	})
	ch.skip = func(f Factory) string {
		if f.Features.AmbiguousErrors {
			return "the backend declares AmbiguousErrors"
		}
		return f.Features.optedOut(c)
	}
	return ch
}

func checkCursorAbsent(t testing.TB, c client) {
	_, ok := c.get("s", "")
	isFalse(t, ok, "GetCursor on an empty store must report no cursor")
	empty(t, c.cursors(), "ListCursors on an empty store")
}

func checkCursorRoundTrip(t testing.TB, c client) {
	in := cursor("stream-a", "", 12, 3, "", "cookie:gen=4;prev=ab12", at(1500*time.Millisecond+7))
	eq(t, []bool{true}, c.advance(in), "first cursor for a key must be written")
	got, ok := c.get("stream-a", "")
	isTrue(t, ok, "cursor just written")
	eq(t, in, got, "GetCursor must return the cursor as written")
	sub := cursor("stream-a", "bot-1", 1, 0, "", "other", at(2*sec))
	eq(t, []bool{true}, c.advance(sub), "a per-subscriber cursor is a different key")
	eq(t, []impl.Cursor{in, sub}, c.cursors(), "ListCursors")
}

func checkCursorRejectsLowerOrEqual(t testing.TB, c client) {
	base := cursor("s", "", 5, 2, "", "v1", at(0))
	eq(t, []bool{true}, c.advance(base), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	equal := cursor("s", "", 5, 2, "", "v2-same-pos", at(sec))
	eq(t, []bool{false}, c.advance(equal), "an equal position must be rejected (strictly greater only)")
	lowerMinor := cursor("s", "", 5, 1, "", "v3", at(2*sec))
	lowerMajor := cursor("s", "", 4, 99, "zzz", "v4", at(3*sec))
	eq(t, []bool{false, false}, c.advance(lowerMinor, lowerMajor), "lower positions must be rejected")
	got, _ := c.get("s", "")
	eq(t, base, got, "rejected writes must leave the cursor untouched, token included")

	tieBreak := cursor("s", "", 5, 2, "a", "v5", at(4*sec))
	eq(t, []bool{true}, c.advance(tieBreak), "same major/minor with a greater ID is greater (\"\" < \"a\")")
	higher := cursor("s", "", 5, 3, "", "v6", at(5*sec))
	eq(t, []bool{true}, c.advance(higher), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	got, _ = c.get("s", "")
	eq(t, higher, got, "GetCursor after advances to higher positions returns the highest cursor written")
}

// Seed 000: two engine nodes (or a node before and after a restart) write
// the same stream's cursor; the stale one must not win.
func checkCursorSameStreamWrittenTwice(t testing.TB, c client) {
	nodeA := cursor("channel-1", "", 10, 4, "", "node-a", at(10*sec))
	nodeB := cursor("channel-1", "", 7, 0, "", "node-b-stale", at(11*sec))
	eq(t, []bool{true}, c.advance(nodeA), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	eq(t, []bool{false}, c.advance(nodeB), "a late write of an older position must not regress the cursor")
	eq(t, []bool{false}, c.advance(nodeA), "writing the same cursor again is not an advance")
	eq(t, []impl.Cursor{nodeA}, c.cursors(), "one stream, one cursor")
}

func checkCursorBatchSameKey(t testing.TB, c client) {
	p2 := cursor("s", "", 2, 0, "", "two", at(0))
	p1 := cursor("s", "", 1, 0, "", "one", at(0))
	p3 := cursor("s", "", 3, 0, "", "three", at(0))
	eq(t, []bool{true, false, true}, c.advance(p2, p1, p3),
		"a batch applies in order: each entry sees the earlier ones")
	got, _ := c.get("s", "")
	eq(t, p3, got, "GetCursor after a batch applied in order returns its last advance")

	q := cursor("t", "bot", 1, 1, "", "q", at(0))
	eq(t, []bool{true, false}, c.advance(q, q), "the same cursor twice in one batch: the second is not an advance")
	other := cursor("u", "", 0, 0, "", "u", at(0))
	eq(t, []bool{false, true}, c.advance(p1, other), "results are per entry, in input order")
}

// Seed 004: (created_at, id) cursors with the lexicographic id tie-break.
func checkCursorTimestampPositions(t testing.TB, c client) {
	ts := func(ms int64, id string) impl.Cursor { return cursor("group-x", "app", ms, 0, id, id, at(0)) }
	eq(t, []bool{true}, c.advance(ts(1_700_000_000_000, "b")), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	eq(t, []bool{false, false, true}, c.advance(
		ts(1_700_000_000_000, "a"),  // same ms, smaller id: before
		ts(1_699_999_999_999, "zz"), // earlier ms, whatever the id
		ts(1_700_000_000_000, "c"),  // same ms, greater id: after
	), "(created_at, id) order: only (same ms, greater id) advances")
	got, _ := c.get("group-x", "app")
	eq(t, ts(1_700_000_000_000, "c"), got, "GetCursor returns the (created_at, id) cursor that advanced")
}

// Sort order is Go's byte order ("B" < "a"), the only order every backend
// can agree on; a database sorting by a locale collation fails here.
func checkCursorListSorted(t testing.TB, c client) {
	in := []impl.Cursor{
		cursor("b", "", 1, 0, "", "1", at(0)),
		cursor("a", "x", 1, 0, "", "2", at(0)),
		cursor("a", "", 1, 0, "", "3", at(0)),
		cursor("B", "", 1, 0, "", "4", at(0)),
		cursor("a", "X", 1, 0, "", "5", at(0)),
		cursor("a-b", "", 1, 0, "", "6", at(0)),
		cursor("ab", "", 1, 0, "", "7", at(0)),
	}
	eq(t, []bool{true, true, true, true, true, true, true}, c.advance(in...), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	want := []impl.Cursor{in[3], in[2], in[4], in[1], in[5], in[6], in[0]}
	eq(t, want, c.cursors(), "ListCursors must sort by Stream then Subscriber, bytewise")
}

// checkCapabilities fails when a capability the Factory asserts is not
// found (impl.AsBlindCursorWriter and friends), when a wrapper
// (impl.Wrapper) drops one the store under it has, or when the Factory
// both asserts and opts out of one. A capability found but not declared
// is no failure: its checks run, and the log says which were found.
func checkCapabilities(t testing.TB, f Features, st impl.Store) {
	var problems, found []string
	for _, c := range []struct {
		cap      Capability
		declared bool
	}{
		{CapBlindCursor, f.BlindCursor},
		{CapLeasedEnqueue, f.LeasedEnqueue},
		{CapHandOff, f.HandOff},
	} {
		have := has(st, c.cap)
		switch {
		case c.declared && !have:
			problems = append(problems, fmt.Sprintf("Features.%s asserts %s but the %T store does not offer it: a wrapper that embeds impl.Store drops it; forward the method and implement impl.Wrapper (Unwrap)", c.cap, capInterface[c.cap], st))
		case c.declared && !f.certifies(c.cap):
			problems = append(problems, fmt.Sprintf("Features.%s asserts %s and Features.OptOut lists it: say one or the other", c.cap, capInterface[c.cap]))
		case have && f.certifies(c.cap):
			found = append(found, capInterface[c.cap]+" (certified)")
		case have:
			found = append(found, capInterface[c.cap]+" (opted out: not certified)")
		}
	}
	for _, c := range f.OptOut {
		if _, ok := capInterface[c]; !ok {
			problems = append(problems, fmt.Sprintf("Features.OptOut lists %q, which is no capability (%s, %s or %s)", c, CapBlindCursor, CapLeasedEnqueue, CapHandOff))
		}
	}
	for _, h := range impl.HiddenCapabilities(st) {
		problems = append(problems, fmt.Sprintf("a wrapper in the %T stack hides impl.%s, which the store under it has: forward the method", st, h))
	}
	if len(problems) > 0 {
		t.Fatal("optional store capabilities are wrong:\n" + strings.Join(problems, "\n"))
	}
	if len(found) == 0 {
		t.Log("optional capabilities found: none")
		return
	}
	t.Log("optional capabilities found: " + strings.Join(found, ", "))
}

func checkBlindCursorWrite(t testing.TB, c client) {
	w, ok := impl.AsBlindCursorWriter(c.st)
	isTrue(t, ok, "impl.AsBlindCursorWriter finds the capability")
	high := cursor("s", "", 10, 0, "", "high", at(0))
	eq(t, []bool{true}, c.advance(high), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	low := cursor("s", "", 3, 0, "", "low", at(sec))
	noErr(t, w.PutCursorBlind(c.ctx, low), "PutCursorBlind")
	got, _ := c.get("s", "")
	eq(t, low, got, "PutCursorBlind is unconditional: it must overwrite even a higher cursor")
	eq(t, []bool{false}, c.advance(cursor("s", "", 2, 0, "", "lower", at(0))), "AdvanceCursors keeps its guard")
}

func checkEnqueueDefaults(t testing.TB, c client) {
	in := msg("bot-1", "ev-1", at(0))
	in.Attempts = 5
	in.NextAttemptAt = at(time.Hour)
	in.LeaseOwner = "someone"
	in.LeaseUntil = at(time.Hour)
	in.Dead = true
	in.LastError = "boom"
	eq(t, 1, c.enqueue(in), "Enqueue inserts each new (Subscriber, EventID) once")
	sameMessages(t, []impl.Message{queued(in)}, c.list(""),
		"Enqueue reads only Subscriber, EventID, Stream, Pos, Payload, CreatedAt; NextAttemptAt starts at CreatedAt")
	eq(t, 0, c.enqueue(), "an empty batch inserts nothing")
}

func checkEnqueueIdempotent(t testing.TB, c client) {
	a := msg("bot-1", "ev-a", at(0))
	aAgain := msg("bot-1", "ev-a", at(5*sec))
	aAgain.Payload = []byte("different payload")
	b := msg("bot-1", "ev-b", at(sec))
	eq(t, 1, c.enqueue(a), "Enqueue inserts each new (Subscriber, EventID) once")
	eq(t, 1, c.enqueue(aAgain, b), "only the new key counts")
	sameMessages(t, []impl.Message{queued(a), queued(b)}, c.list("bot-1"), "the existing message is left untouched")

	x1, x2 := msg("bot-2", "ev-x", at(0)), msg("bot-2", "ev-x", at(sec))
	x2.Payload = []byte("second")
	eq(t, 1, c.enqueue(x1, x2), "a key twice in one batch inserts once")
	sameMessages(t, []impl.Message{queued(x1)}, c.list("bot-2"), "the first of a repeated key wins")

	same := msg("bot-3", "ev-a", at(0))
	eq(t, 1, c.enqueue(same), "idempotence is per (Subscriber, EventID): another subscriber's ev-a is new")

	leased := c.claim("bot-1", "node-1", at(10*sec), 30*sec, 1)
	eq(t, []impl.MessageKey{key("bot-1", "ev-a")}, keys(leased), "Claim with limit 1 leases the oldest due message")
	eq(t, 0, c.enqueue(a), "re-enqueueing a leased message must not reset it")
	sameMessage(t, leased[0], c.list("bot-1")[0], "the lease survives a duplicate Enqueue")

	_, ok := c.fail(key("bot-1", "ev-a"), "node-1", at(11*sec), 1, "http 500")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")
	deadBefore := c.list("bot-1")[0]
	isTrue(t, deadBefore.Dead, deadSetup)
	eq(t, 0, c.enqueue(a), "re-enqueueing a dead message must not revive it")
	sameMessage(t, deadBefore, c.list("bot-1")[0], "a dead message survives a duplicate Enqueue")
}

// After Ack the key is gone, so the store cannot tell a replayed event from
// a new one: Enqueue inserts it again. That is the at-least-once duplicate
// the receiver's dedup (MarkProcessed) exists for.
func checkEnqueueAfterAck(t testing.TB, c client) {
	a := msg("bot-1", "ev-a", at(0))
	eq(t, 1, c.enqueue(a), "Enqueue inserts each new (Subscriber, EventID) once")
	eq(t, 1, c.ack(key("bot-1", "ev-a")), "Ack deletes the message and counts it")
	replayed := msg("bot-1", "ev-a", at(time.Minute))
	eq(t, 1, c.enqueue(replayed), "an acked key is absent, so Enqueue inserts it again")
	sameMessages(t, []impl.Message{queued(replayed)}, c.list(""), "a fresh message: Attempts 0, new CreatedAt")
}

func checkListQueueOrder(t testing.TB, c client) {
	in := []impl.Message{
		msg("b2", "e1", at(0)),
		msg("b1", "e9", at(2*sec)),
		msg("b1", "e2", at(sec)),
		msg("b1", "e1", at(sec)), // ties with e2 on CreatedAt: EventID decides
		msg("B0", "e5", at(9*sec)),
		msg("b1", "e0", at(3*sec)),
	}
	eq(t, len(in), c.enqueue(in...), "Enqueue inserts each new (Subscriber, EventID) once")
	want := []impl.MessageKey{key("B0", "e5"), key("b1", "e1"), key("b1", "e2"), key("b1", "e9"), key("b1", "e0"), key("b2", "e1")}
	eq(t, want, keys(c.list("")), "QueueOrder: Subscriber (bytewise), CreatedAt, EventID")
	eq(t, want[1:5], keys(c.list("b1")), "ListMessages(subscriber) returns only that subscriber's")
	empty(t, c.list("nobody"), "ListMessages of a subscriber with no messages")
	sameMessages(t, []impl.Message{queued(in[4])}, c.list("B0"), "full message")
}

func checkClaimDueInQueueOrder(t testing.TB, c client) {
	eq(t, 3, c.enqueue(msg("b1", "e3", at(2*sec)), msg("b1", "e2", at(0)), msg("b1", "e1", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	empty(t, keys(c.claim("b1", "n1", at(sec), 30*sec, 0)), "Limit 0 claims nothing")

	got := c.claim("b1", "n1", at(sec), 30*sec, 10)
	eq(t, []impl.MessageKey{key("b1", "e1"), key("b1", "e2")}, keys(got),
		"only due messages (NextAttemptAt <= now), in QueueOrder; e3 is due at t+2s")
	for i, ev := range []string{"e1", "e2"} {
		want := queued(msg("b1", ev, at(0)))
		want.LeaseOwner, want.LeaseUntil = "n1", model.NormTime(at(31*sec))
		sameMessage(t, want, got[i], "a claimed message shows its new lease (owner, now + lease)")
	}
	sameMessages(t, got, c.list("b1")[:2], "the lease is stored, not only returned")

	empty(t, keys(c.claim("b1", "n2", at(sec), 30*sec, 10)), "leased and not-yet-due messages are not claimable")
	got = c.claim("b1", "n2", at(2*sec), 30*sec, 10)
	eq(t, []impl.MessageKey{key("b1", "e3")}, keys(got), "NextAttemptAt == now is due")

	eq(t, 2, c.enqueue(msg("b1", "e4", at(3*sec)), msg("b1", "e5", at(3*sec))), "Enqueue inserts each new (Subscriber, EventID) once")
	eq(t, []impl.MessageKey{key("b1", "e4")}, keys(c.claim("b1", "n3", at(4*sec), sec, 1)), "Limit caps the claim, oldest first")
}

func checkClaimSubscriberFilter(t testing.TB, c client) {
	eq(t, 4, c.enqueue(msg("b2", "e1", at(0)), msg("b1", "e2", at(sec)), msg("b1", "e1", at(2*sec)), msg("b3", "e1", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	eq(t, []impl.MessageKey{key("b2", "e1")}, keys(c.claim("b2", "n1", at(5*sec), sec, 5)), "Subscriber set: only that subscriber")
	empty(t, keys(c.claim("nobody", "n1", at(5*sec), sec, 5)), "Claim for a subscriber with no messages")
	eq(t, []impl.MessageKey{key("b1", "e2"), key("b1", "e1")}, keys(c.claim("", "n1", at(5*sec), sec, 2)),
		"Subscriber empty: any subscriber, in QueueOrder (subscriber first)")
	eq(t, []impl.MessageKey{key("b3", "e1")}, keys(c.claim("", "n1", at(5*sec), sec, 5)), "b2's message is still leased")
}

func checkClaimLeaseExpiry(t testing.TB, c client) {
	eq(t, 1, c.enqueue(msg("b1", "e1", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	length(t, c.claim("b1", "n1", at(0), 10*sec, 1), 1, "Claim leases the due messages, up to Limit")
	empty(t, keys(c.claim("b1", "n2", at(10*sec-1), 10*sec, 1)), "a lease is active until LeaseUntil")
	got := c.claim("b1", "n2", at(10*sec), 10*sec, 1)
	eq(t, []impl.MessageKey{key("b1", "e1")}, keys(got), "LeaseUntil <= now: the lease expired, the message is claimable again")
	eq(t, "n2", got[0].LeaseOwner, "the claimed message's LeaseOwner is req.Owner")
	eq(t, model.NormTime(at(20*sec)), got[0].LeaseUntil, "the claimed message's LeaseUntil is req.Now + req.Lease")
	eq(t, 0, got[0].Attempts, "claiming is not an attempt; only Fail counts")
}

func checkAck(t testing.TB, c client) {
	eq(t, 3, c.enqueue(msg("b1", "e1", at(0)), msg("b1", "e2", at(0)), msg("b2", "e1", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	length(t, c.claim("b1", "n1", at(0), time.Hour, 1), 1, "Claim leases the due messages, up to Limit")
	eq(t, 2, c.ack(key("b1", "e1"), key("b1", "e1"), key("b1", "missing"), key("b2", "e1")),
		"Ack counts deleted messages: a repeated or absent key counts once or not at all; the lease is not checked")
	eq(t, []impl.MessageKey{key("b1", "e2")}, keys(c.list("")), "after Ack only the message nobody acked is listed")
	eq(t, 0, c.ack(), "empty Ack")
}

func checkFailRetriesThenDead(t testing.TB, c client) {
	k := key("b1", "e1")
	eq(t, 1, c.enqueue(msg("b1", "e1", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	length(t, c.claim("b1", "n1", at(0), 30*sec, 1), 1, "Claim leases the due messages, up to Limit")

	got, ok := c.fail(k, "n1", at(sec), 3, "timeout")
	isTrue(t, ok, "the lease owner's failure is recorded")
	want := queued(msg("b1", "e1", at(0)))
	want.Attempts, want.NextAttemptAt, want.LastError = 1, model.NormTime(at(sec)), "timeout"
	sameMessage(t, want, got, "Fail: Attempts+1, lease cleared, LastError, NextAttemptAt = nextAttempt")
	sameMessages(t, []impl.Message{want}, c.list(""), "Fail returns the message as stored")

	empty(t, keys(c.claim("b1", "n1", at(sec-1), 30*sec, 1)), "not due before nextAttempt")
	length(t, c.claim("b1", "n1", at(sec), 30*sec, 1), 1, "Claim leases the due messages, up to Limit")
	got, ok = c.fail(k, "n1", at(3*sec), 3, "http 503")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")
	eq(t, 2, got.Attempts, "the second recorded Fail makes Attempts 2")
	isFalse(t, got.Dead, "after 2 of 3 attempts the message is still live: only \"When Attempts reaches req.MaxAttempts the message becomes dead\"")

	length(t, c.claim("b1", "n2", at(3*sec), 30*sec, 1), 1, "Claim leases the due messages, up to Limit")
	got, ok = c.fail(k, "n2", at(7*sec), 3, "connection refused")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")
	want.Attempts, want.Dead, want.LastError, want.NextAttemptAt = 3, true, "connection refused", model.NormTime(at(7*sec))
	isTrue(t, got.Dead, "the third Fail with MaxAttempts 3 makes the message dead: \"When Attempts reaches req.MaxAttempts the message becomes dead\"")
	eq(t, want.NextAttemptAt, got.NextAttemptAt, "NextAttemptAt of the message the Fail made dead: %q", ruleFailDeadNextAttempt)
	sameMessage(t, want, got, "the message as the Fail that made it dead returns it")
	empty(t, keys(c.claim("b1", "n1", at(time.Hour), 30*sec, 1)), "a dead message is never claimed")
	sameMessages(t, []impl.Message{want}, c.list("b1"), "a dead message stays listed (dead letter)")
}

func checkFailStale(t testing.TB, c client) {
	k := key("b1", "e1")
	_, ok := c.fail(k, "n1", at(sec), 3, "x")
	isFalse(t, ok, "Fail of an absent key")
	eq(t, 1, c.enqueue(msg("b1", "e1", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	_, ok = c.fail(k, "n1", at(sec), 3, "x")
	isFalse(t, ok, "Fail of a message nobody leased is stale")
	sameMessages(t, []impl.Message{queued(msg("b1", "e1", at(0)))}, c.list(""), "a stale Fail changes nothing")

	length(t, c.claim("b1", "n1", at(0), 10*sec, 1), 1, "Claim leases the due messages, up to Limit")
	leased := c.list("")
	_, ok = c.fail(k, "n2", at(sec), 3, "x")
	isFalse(t, ok, "Fail by a non-owner is stale")
	sameMessages(t, leased, c.list(""), "a stale Fail changes nothing")

	length(t, c.claim("b1", "n2", at(10*sec), 10*sec, 1), 1, "n1's lease expired; n2 takes over")
	stolen := c.list("")
	_, ok = c.fail(k, "n1", at(sec), 1, "late failure from the old owner")
	isFalse(t, ok, "the old owner's late failure is stale once someone else holds the lease")
	sameMessages(t, stolen, c.list(""), "a stale Fail changes nothing")

	got, ok := c.fail(k, "n2", at(20*sec), 3, "y")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")
	eq(t, 1, got.Attempts, "the first recorded Fail makes Attempts 1")
	_, ok = c.fail(k, "n2", at(20*sec), 3, "again")
	isFalse(t, ok, "Fail cleared the lease, so a second Fail by the same node is stale")
}

// The contract's answers to two questions a store written from the text
// alone asked, quoted in the failures that enforce them.
const (
	ruleFailDeadNextAttempt   = "A Fail that makes a message dead still sets NextAttemptAt to req.NextAttempt, like every other recorded Fail"
	ruleRequeueKeepsLastError = "Requeue keeps LastError (why the message died) and every other field: the message stays the one row it was."
	ruleOneRowPerKey          = "A store holds at most one message per (Subscriber, EventID), so no key is listed twice."
)

// deadSetup is the failure of a check that makes a dead letter to test
// something else, when the Fail meant to kill the message did not: the
// rule that broke is Fail's, which Contract/FailRetriesThenDead checks.
const deadSetup = "setting up a dead letter, a Fail with MaxAttempts 1 did not make the message dead, so this check cannot go on: " +
	"\"When Attempts reaches req.MaxAttempts the message becomes dead\" (Contract/FailRetriesThenDead checks that rule)"

// oneRow returns the message of key k in ms, failing unless it is listed
// exactly once.
func oneRow(t testing.TB, ms []impl.Message, k impl.MessageKey, when string) impl.Message {
	t.Helper()
	var rows []impl.Message
	for _, m := range ms {
		if m.Key() == k {
			rows = append(rows, m)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("ListMessages lists %s %d times %s, want once (%q)\n  rows: %s", showKey(k), len(rows), when, ruleOneRowPerKey, show(rows))
	}
	return rows[0]
}

func checkRequeue(t testing.TB, c client) {
	k := key("b1", "e1")
	isFalse(t, c.requeue(k, at(0)), "Requeue of an absent key returns false")
	eq(t, 1, c.enqueue(msg("b1", "e1", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	isFalse(t, c.requeue(k, at(0)), "Requeue of a live message returns false")
	length(t, c.claim("b1", "n1", at(0), 10*sec, 1), 1, "Claim leases the due messages, up to Limit")
	_, ok := c.fail(k, "n1", at(sec), 1, "poison")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")
	isTrue(t, oneRow(t, c.list(""), k, "after the Fail that reached MaxAttempts").Dead, deadSetup)

	isTrue(t, c.requeue(k, at(time.Hour)), "Requeue of a dead message returns true")
	want := queued(msg("b1", "e1", at(0)))
	want.NextAttemptAt, want.LastError = model.NormTime(at(time.Hour)), "poison"
	sameMessage(t, want, oneRow(t, c.list(""), k, "after Requeue"),
		"the requeued message: live, Attempts = 0, NextAttemptAt = now; "+fmt.Sprintf("%q", ruleRequeueKeepsLastError))
	sameMessages(t, []impl.Message{want}, c.list("b1"), "ListMessages(\"b1\") after Requeue: "+ruleOneRowPerKey)
	empty(t, keys(c.claim("b1", "n1", at(time.Hour-1), sec, 1)), "a requeued message is not due before the Requeue's now")
	length(t, c.claim("b1", "n1", at(time.Hour), sec, 1), 1, "a requeued message is claimable again")
	isFalse(t, c.requeue(k, at(time.Hour)), "Requeue of a live (leased) message returns false")
}

func checkDeleteExpired(t testing.TB, c client) {
	cutoff := at(time.Hour)
	now := at(2 * time.Hour)
	eq(t, 6, c.enqueue(
		msg("b1", "old", cutoff.Add(-1)),        // one nanosecond too old: deleted
		msg("b1", "boundary", cutoff),           // CreatedAt == cutoff: kept
		msg("b1", "young", cutoff.Add(sec)),     // kept
		msg("b2", "old-leased", at(0)),          // lease ends just after now: kept
		msg("b2", "old-lease-expired", at(sec)), // lease ends exactly at now: deleted
		msg("b3", "old-dead", at(0)),            // dead letters age out too
	), "Enqueue inserts each new (Subscriber, EventID) once")
	// QueueOrder hands out old-leased first, then old-lease-expired.
	eq(t, []impl.MessageKey{key("b2", "old-leased")}, keys(c.claim("b2", "n1", now.Add(-10*sec), 10*sec+1, 1)), "Claim leases the due messages (not dead, NextAttemptAt <= now, no active lease), in QueueOrder, up to Limit")
	eq(t, []impl.MessageKey{key("b2", "old-lease-expired")}, keys(c.claim("b2", "n1", now.Add(-20*sec), 20*sec, 1)), "Claim leases the due messages (not dead, NextAttemptAt <= now, no active lease), in QueueOrder, up to Limit")
	length(t, c.claim("b3", "n1", at(0), sec, 1), 1, "Claim leases the due messages, up to Limit")
	_, ok := c.fail(key("b3", "old-dead"), "n1", at(sec), 1, "poison")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")

	eq(t, 3, c.expire(cutoff, now), "DeleteExpired must delete old, old-lease-expired and old-dead")
	eq(t, []impl.MessageKey{key("b1", "boundary"), key("b1", "young"), key("b2", "old-leased")}, keys(c.list("")),
		"deleted: CreatedAt < cutoff unless LeaseUntil > now; kept: CreatedAt == cutoff, and the message still leased")
	eq(t, 0, c.expire(cutoff, now), "nothing left to expire")
}

func checkTrimKeepsNewest(t testing.TB, c client) {
	eq(t, 8, c.enqueue(
		msg("b1", "e5", at(4*sec)),
		msg("b1", "e1", at(0)),
		msg("b1", "e2b", at(sec)),
		msg("b1", "e2a", at(sec)), // ties with e2b: older by EventID
		msg("b1", "e4", at(3*sec)),
		msg("b1", "e3", at(2*sec)),
		msg("b2", "x1", at(0)),
		msg("b2", "x2", at(0)),
	), "Enqueue inserts each new (Subscriber, EventID) once")
	eq(t, 3, c.trim(3, at(time.Hour)), "b1 holds 6, cap 3: the 3 oldest go; b2 holds 2: untouched")
	eq(t, []impl.MessageKey{key("b1", "e3"), key("b1", "e4"), key("b1", "e5"), key("b2", "x1"), key("b2", "x2")}, keys(c.list("")),
		"the newest are kept")
	eq(t, 0, c.trim(3, at(time.Hour)), "a second trim finds nothing over the cap")
	eq(t, 3, c.trim(1, at(time.Hour)), "cap 1: b1 loses e3 and e4, b2 loses x1")
	eq(t, []impl.MessageKey{key("b1", "e5"), key("b2", "x2")}, keys(c.list("")), "ties on CreatedAt: the smaller EventID is older")
	eq(t, 2, c.trim(0, at(time.Hour)), "cap 0 empties every queue")
	empty(t, c.list(""), "ListMessages(\"\") after every message was removed")
}

// Seed 003's cap is per subscriber, whatever stream a message came from:
// a store that counts per (subscriber, stream) keeps too many, and one
// that trims each stream's oldest first deletes the wrong ones.
func checkTrimAcrossStreams(t testing.TB, c client) {
	on := func(stream, sub, ev string, created time.Time) impl.Message {
		m := msg(sub, ev, created)
		m.Stream = stream
		return m
	}
	in := []impl.Message{
		on("s1", "b1", "a", at(0)), on("s2", "b1", "b", at(sec)), on("s3", "b1", "c", at(sec)),
		on("s1", "b1", "d", at(2*sec)), on("s2", "b1", "e", at(3*sec)), on("s3", "b1", "f", at(3*sec)),
		on("s3", "b1", "g", at(4*sec)), on("s1", "b1", "h", at(5*sec)), on("s2", "b1", "i", at(6*sec)),
		on("s3", "b2", "x", at(0)), on("s1", "b2", "y", at(9*sec)), on("s3", "b2", "z", at(9*sec)),
		on("s2", "b3", "p", at(0)),
	}
	eq(t, len(in), c.enqueue(in...), "Enqueue inserts each new (Subscriber, EventID) once")
	eq(t, 6, c.trim(3, at(time.Hour)), "cap 3 over three streams: b1 holds 9 (in s1, s2 and s3) and loses 6; b2 holds 3, b3 holds 1")
	eq(t, []impl.MessageKey{key("b1", "g"), key("b1", "h"), key("b1", "i"), key("b2", "x"), key("b2", "y"), key("b2", "z"), key("b3", "p")}, keys(c.list("")),
		"each subscriber keeps its 3 newest, whichever stream each came from")
	eq(t, 2, c.trim(2, at(time.Hour)), "cap 2: b1 loses g (s3), b2 loses x (s3)")
	eq(t, []impl.MessageKey{key("b1", "h"), key("b1", "i"), key("b2", "y"), key("b2", "z"), key("b3", "p")}, keys(c.list("")),
		"ties on CreatedAt across streams: the smaller EventID is older")
}

// manyTies builds the queue of checkManyEqualCreatedAt in QueueOrder:
// hundreds of messages whose CreatedAt is equal, so that any page size a
// store might read them in (10, 64, 100, 128, 256...) ends inside a run of
// equal CreatedAt, where only the EventID orders them.
func manyTies() []impl.Message {
	var out []impl.Message
	add := func(sub string, n int, created time.Time, prefix string) {
		for i := range n {
			out = append(out, msg(sub, fmt.Sprintf("%s%04d", prefix, i), created))
		}
	}
	add("B0", 3, at(0), "e")         // sorts before every lower-case subscriber
	add("b1", 7, at(-sec), "early-") // a few before the run of ties
	add("b1", 300, at(0), "e")
	add("b1", 9, at(sec), "late-")
	add("b2", 257, at(0), "e")
	return out
}

func checkManyEqualCreatedAt(t testing.TB, c client) {
	want := manyTies()
	// Enqueued out of order (a fixed shuffle), in batches of 50: the
	// order ListMessages returns must come from the store, not from the
	// order of insertion.
	shuffled := slices.Clone(want)
	rand.New(rand.NewPCG(38, 38)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for batch := range slices.Chunk(shuffled, 50) {
		eq(t, len(batch), c.enqueue(batch...), "Enqueue inserts each new (Subscriber, EventID) once")
	}
	queuedAll := func(ms []impl.Message) []impl.Message {
		out := make([]impl.Message, len(ms))
		for i, m := range ms {
			out[i] = queued(m)
		}
		return out
	}
	of := func(sub string) []impl.Message {
		var out []impl.Message
		for _, m := range want {
			if m.Subscriber == sub {
				out = append(out, m)
			}
		}
		return out
	}
	sameMessages(t, queuedAll(want), c.list(""), fmt.Sprintf("ListMessages(\"\") of %d messages, %d of them sharing one CreatedAt per subscriber, in QueueOrder (Subscriber, CreatedAt, EventID)", len(want), 300))
	sameMessages(t, queuedAll(of("b1")), c.list("b1"), "ListMessages(\"b1\") of 316 messages, 300 sharing one CreatedAt")

	// Claim chooses in QueueOrder too: claimed 64 at a time, b2's 257 ties
	// come out each once, in order.
	var claimed []impl.Message
	for range 6 {
		claimed = append(claimed, c.claim("b2", "n1", at(2*sec), time.Hour, 64)...)
	}
	eq(t, keys(of("b2")), keys(claimed), "Claim with Limit 64, six times over 257 messages that share a CreatedAt: each once, in QueueOrder")

	// The cap applies across the ties: each subscriber keeps its newest
	// 150 by (CreatedAt, EventID); b2's are all leased and stay.
	eq(t, 316-150, c.trim(150, at(3*sec)), "cap 150: b1 (316 messages) loses its 166 oldest; b2's 257 are leased, B0 holds 3")
	wantAfter := append(append(queuedAll(of("B0")), queuedAll(of("b1")[316-150:])...), claimed...)
	sameMessages(t, wantAfter, c.list(""), "after TrimPerSubscriber(150): b1's newest 150, the last of them in its run of equal CreatedAt")
}

func checkTrimLeased(t testing.TB, c client) {
	eq(t, 4, c.enqueue(msg("b1", "a", at(0)), msg("b1", "b", at(sec)), msg("b1", "c", at(2*sec)), msg("b1", "d", at(3*sec))), "Enqueue inserts each new (Subscriber, EventID) once")
	eq(t, []impl.MessageKey{key("b1", "a")}, keys(c.claim("b1", "n1", at(10*sec), 10*sec, 1)), "Claim leases the due messages (not dead, NextAttemptAt <= now, no active lease), in QueueOrder, up to Limit")
	eq(t, 2, c.trim(2, at(15*sec)), "the leased oldest counts toward the cap but is skipped: b and c go")
	eq(t, []impl.MessageKey{key("b1", "a"), key("b1", "d")}, keys(c.list("")),
		"a message being delivered is never trimmed, and the queue is back within the cap")
	eq(t, 1, c.trim(0, at(20*sec-1)), "cap 0: d goes, the leased a stays")
	eq(t, []impl.MessageKey{key("b1", "a")}, keys(c.list("")), "cap 0: only the leased message is left")
	eq(t, 1, c.trim(0, at(20*sec)), "LeaseUntil == now: the lease ended, a can be trimmed")
	empty(t, c.list(""), "ListMessages(\"\") after every message was removed")

	eq(t, 3, c.enqueue(msg("b2", "x", at(0)), msg("b2", "y", at(0)), msg("b2", "z", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	length(t, c.claim("b2", "n1", at(0), time.Hour, 3), 3, "Claim leases the due messages, up to Limit")
	eq(t, 0, c.trim(1, at(sec)), "more leased messages than the cap: nothing can go")
}

func checkDelivered(t testing.TB, c client) {
	empty(t, c.delivered("app-1", "repo-1"), "nothing delivered yet")
	c.record("app-1", "repo-1", []impl.DeliveredItem{{ID: "src/b.go", Version: "sha1"}, {ID: "README", Version: "sha2"}, {ID: "src/a.go", Version: "sha3"}})
	eq(t, []impl.DeliveredItem{{ID: "README", Version: "sha2"}, {ID: "src/a.go", Version: "sha3"}, {ID: "src/b.go", Version: "sha1"}},
		c.delivered("app-1", "repo-1"), "sorted by ID")

	c.record("app-2", "repo-1", []impl.DeliveredItem{{ID: "README", Version: "other"}})
	c.record("app-1", "repo-1", []impl.DeliveredItem{{ID: "src/a.go", Version: "sha4"}}, "src/b.go", "never-delivered")
	eq(t, []impl.DeliveredItem{{ID: "README", Version: "sha2"}, {ID: "src/a.go", Version: "sha4"}}, c.delivered("app-1", "repo-1"),
		"upsert sets the version, deleted ids go, absent deleted ids are ignored")
	eq(t, []impl.DeliveredItem{{ID: "README", Version: "other"}}, c.delivered("app-2", "repo-1"),
		"seed 002: each (app, source) has its own delivered state")
	empty(t, c.delivered("app-1", "repo-2"), "another source of the same app has its own (empty) delivered state")

	c.record("app-2", "repo-1", []impl.DeliveredItem{{ID: "x", Version: "v1"}, {ID: "x", Version: "v2"}})
	eq(t, []impl.DeliveredItem{{ID: "README", Version: "other"}, {ID: "x", Version: "v2"}}, c.delivered("app-2", "repo-1"),
		"an ID repeated in one call: upserts apply in order, the last wins")
	c.record("app-2", "repo-1", nil, "README", "x")
	empty(t, c.delivered("app-2", "repo-1"), "every delivered id was deleted")
}

func checkMarkProcessed(t testing.TB, c client) {
	w := 10 * sec
	isTrue(t, c.mark("bot-1", "ev-1", at(0), w), "first sight")
	isFalse(t, c.mark("bot-1", "ev-1", at(5*sec), w), "duplicate within the window")
	isTrue(t, c.mark("bot-2", "ev-1", at(5*sec), w), "dedup is per subscriber")
	isTrue(t, c.mark("bot-1", "ev-2", at(5*sec), w), "and per event")
	isFalse(t, c.mark("bot-1", "ev-1", at(10*sec-1), w), "one nanosecond before the window ends the entry is live: a duplicate")
	isTrue(t, c.mark("bot-1", "ev-1", at(10*sec), w), "last seen at exactly now - window: the entry expired")
	isFalse(t, c.mark("bot-1", "ev-1", at(15*sec), w), "the expired entry was refreshed at t+10s")
	isTrue(t, c.mark("bot-1", "ev-1", at(20*sec), w),
		"the duplicate at t+15s must not have refreshed the entry (it would still be live until t+25s)")
}

// Backends store Unix nanoseconds and read them back with impl.TimeOf:
// UTC, no monotonic reading, nanoseconds intact, so a value read back is
// == to impl.TimeOf(impl.NanosOf(written)).
func checkTimesNormalised(t testing.TB, c client) {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	created := time.Date(2025, 3, 1, 18, 0, 0, 123456789, zone)
	updated := time.Date(2025, 3, 1, 19, 0, 0, 987654321, zone)
	norm := func(t time.Time) time.Time { return impl.TimeOf(impl.NanosOf(t)) }

	eq(t, []bool{true}, c.advance(cursor("s", "", 1, 0, "", "tok", updated)), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	got, _ := c.get("s", "")
	exactTime(t, norm(updated), got.UpdatedAt, "GetCursor's UpdatedAt")

	eq(t, 1, c.enqueue(msg("b1", "e1", created)), "Enqueue inserts each new (Subscriber, EventID) once")
	claimed := c.claim("b1", "n1", created.Add(sec), 1500*time.Millisecond+1, 1)
	length(t, claimed, 1, "Claim leases the due messages, up to Limit")
	for _, m := range append(claimed, c.list("")...) {
		exactTime(t, norm(created), m.CreatedAt, "CreatedAt of %s", showKey(m.Key()))
		exactTime(t, norm(created), m.NextAttemptAt, "NextAttemptAt of %s", showKey(m.Key()))
		wantLease := norm(created.Add(2500*time.Millisecond + 1))
		exactTime(t, wantLease, m.LeaseUntil, "LeaseUntil of %s", showKey(m.Key()))
	}
	failed, ok := c.fail(key("b1", "e1"), "n1", updated, 5, "x")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")
	exactTime(t, norm(updated), failed.NextAttemptAt, "NextAttemptAt Fail returned")
	exactTime(t, time.Time{}, failed.LeaseUntil, "LeaseUntil after Fail cleared the lease (the zero time)")
}

// The caller owns what it passes in and what it gets back: mutating either
// must not reach the store.
func checkNoAliasing(t testing.TB, c client) {
	in := msg("b1", "e1", at(0))
	payload := in.Payload
	want := queued(msg("b1", "e1", at(0)))
	eq(t, 1, c.enqueue(in), "Enqueue inserts each new (Subscriber, EventID) once")
	payload[0] = 'X'
	out := c.list("")
	sameMessages(t, []impl.Message{want}, out, "mutating Enqueue's input afterwards must not change the stored payload")
	out[0].Payload[0] = 'Y'
	claimed := c.claim("b1", "n1", at(0), sec, 1)
	claimed[0].Payload[1] = 'Z'
	sameMessages(t, []impl.Message{want}, keepLease(c.list(""), false), "mutating returned payloads must not change the store")

	cur := cursor("s", "", 1, 0, "", "token", at(0))
	token := cur.Token
	eq(t, []bool{true}, c.advance(cur), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	token[0] = 'X'
	got, _ := c.get("s", "")
	eq(t, []byte("token"), got.Token, "mutating AdvanceCursors' input afterwards must not change the stored token")
	got.Token[0] = 'Y'
	list := c.cursors()
	eq(t, []byte("token"), list[0].Token, "mutating a returned token must not change the store")
}

// keepLease strips lease fields when keep is false, for comparisons that
// are about something else.
func keepLease(ms []impl.Message, keep bool) []impl.Message {
	if keep {
		return ms
	}
	out := make([]impl.Message, len(ms))
	for i, m := range ms {
		m.LeaseOwner, m.LeaseUntil = "", time.Time{}
		out[i] = m
	}
	return out
}

// leasedMsg is msg handed straight to owner until until, as a replaying
// engine enqueues a message it is about to send itself.
func leasedMsg(sub, ev string, created time.Time, owner string, until time.Time) impl.Message {
	m := msg(sub, ev, created)
	m.LeaseOwner, m.LeaseUntil = owner, until
	return m
}

// leasedAs is m as EnqueueLeased must store it: queued, plus its lease.
func leasedAs(m impl.Message) impl.Message {
	q := queued(m)
	q.LeaseOwner, q.LeaseUntil = m.LeaseOwner, model.NormTime(m.LeaseUntil)
	return q
}

// The optional impl.LeasingEnqueuer, run when the store offers it
// (declared or not; Contract/Capabilities fails a backend that declares
// it without having it).
func checkEnqueueLeased(t testing.TB, c client) {
	l, ok := impl.AsLeasingEnqueuer(c.st)
	isTrue(t, ok, "impl.AsLeasingEnqueuer finds the capability")
	enqueueLeased := func(msgs ...impl.Message) []bool {
		t.Helper()
		got, err := l.EnqueueLeased(c.ctx, msgs)
		noErr(t, err, "EnqueueLeased")
		return got
	}
	empty(t, enqueueLeased(), "an empty batch inserts nothing")

	existing := msg("b1", "old", at(0))
	eq(t, 1, c.enqueue(existing), "Enqueue inserts each new (Subscriber, EventID) once")
	oldAgain := leasedMsg("b1", "old", at(sec), "n1", at(time.Minute))
	leased := leasedMsg("b1", "e2", at(2*sec), "n1", at(30*sec))
	plain := msg("b1", "e1", at(2*sec))
	plain.LeaseUntil = at(time.Hour) // no owner: a plain enqueue, LeaseUntil ignored
	plain.Attempts, plain.Dead, plain.LastError, plain.NextAttemptAt = 4, true, "boom", at(time.Hour)
	leasedRepeat := leasedMsg("b1", "e2", at(3*sec), "n2", at(time.Hour))
	leasedRepeat.Payload = []byte("second")
	other := leasedMsg("B0", "e3", at(sec), "n2", at(10*sec))
	eq(t, []bool{false, true, true, false, true}, enqueueLeased(oldAgain, leased, plain, leasedRepeat, other),
		"inserted per input: an existing key and the second of a repeated key are not inserted")
	sameMessages(t, []impl.Message{leasedAs(other), queued(existing), queued(plain), leasedAs(leased)}, c.list(""),
		"the existing message is untouched, the first of a repeated key wins, a leased message stores its lease, "+
			"an unleased one is stored as Enqueue stores it")

	eq(t, []impl.MessageKey{key("b1", "old"), key("b1", "e1")}, keys(c.claim("", "n3", at(10*sec-1), sec, 10)),
		"a message inserted leased is not claimable while its lease is active")
	eq(t, []impl.MessageKey{key("B0", "e3")}, keys(c.claim("B0", "n3", at(10*sec), sec, 10)),
		"LeaseUntil == now: the given lease ended, the message is claimable")
	eq(t, []impl.MessageKey{key("b1", "old"), key("b1", "e1")}, keys(c.claim("b1", "n3", at(30*sec-1), sec, 10)),
		"e2's given lease is active until its LeaseUntil")
	got := c.claim("b1", "n3", at(30*sec), sec, 10)
	eq(t, []impl.MessageKey{key("b1", "e2")}, keys(got), "and claimable from then on")
	want := queued(leased)
	want.LeaseOwner, want.LeaseUntil = "n3", model.NormTime(at(31*sec))
	sameMessage(t, want, got[0], "a leased-inserted message claimed after expiry: Attempts 0, the new lease")

	// The lease holder can fail it like a claimed message.
	eq(t, []bool{true}, enqueueLeased(leasedMsg("b2", "x", at(40*sec), "n1", at(time.Hour))), "EnqueueLeased inserts a new key")
	_, ok = c.fail(key("b2", "x"), "n2", at(41*sec), 3, "not mine")
	isFalse(t, ok, "Fail by someone other than the given LeaseOwner is stale")
	failed, ok := c.fail(key("b2", "x"), "n1", at(41*sec), 3, "http 500")
	isTrue(t, ok, "the given LeaseOwner holds the lease, so its Fail is recorded")
	eq(t, 1, failed.Attempts, "the given LeaseOwner's Fail makes Attempts 1")

	eq(t, 5, c.ack(key("b1", "old"), key("b1", "e1"), key("b1", "e2"), key("B0", "e3"), key("b2", "x")),
		"Ack deletes leased-inserted messages like any other")
	empty(t, c.list(""), "ListMessages(\"\") after every message was removed")
	eq(t, []bool{true}, enqueueLeased(leasedMsg("b1", "e2", at(time.Minute), "n1", at(2*time.Minute))),
		"an acked key is absent, so EnqueueLeased inserts it again")
}
