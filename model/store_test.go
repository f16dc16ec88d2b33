package model

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func msg(sub, ev string, created time.Time) impl.Message {
	return impl.Message{Subscriber: sub, EventID: ev, Stream: "s", Payload: []byte(ev), CreatedAt: created}
}

func mk(sub, ev string) impl.MessageKey { return impl.MessageKey{Subscriber: sub, EventID: ev} }

func evs(ms []impl.Message) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.Subscriber+"/"+m.EventID)
	}
	return out
}

// randomOp draws an op over a small key space; it is the model's own
// generator, independent of the conformance suite's.
func randomOp(r *rand.Rand, now time.Time) Op {
	sub := []string{"a", "b"}[r.IntN(2)]
	ev := fmt.Sprintf("e%d", r.IntN(4))
	k := mk(sub, ev)
	d := func() time.Duration { return time.Duration(r.IntN(4)) * time.Second }
	switch r.IntN(13) {
	case 0:
		return Op{Kind: OpAdvanceCursors, Cursors: []impl.Cursor{{Key: impl.CursorKey{Stream: sub}, Pos: impl.Position{Major: int64(r.IntN(4))}, Token: []byte{byte(r.IntN(3))}, UpdatedAt: now}}}
	case 1:
		return Op{Kind: OpPutCursorBlind, Cursor: impl.Cursor{Key: impl.CursorKey{Stream: sub}, Pos: impl.Position{Major: int64(r.IntN(4))}}}
	case 2, 3:
		return Op{Kind: OpEnqueue, Messages: []impl.Message{msg(sub, ev, now.Add(-d()))}}
	case 4:
		return Op{Kind: OpClaim, Claim: impl.ClaimRequest{Subscriber: []string{"", sub}[r.IntN(2)], Owner: "n" + sub, Now: now, Lease: d(), Limit: r.IntN(3)}}
	case 5:
		return Op{Kind: OpAck, Keys: []impl.MessageKey{k}}
	case 6:
		return Op{Kind: OpFail, Key: k, Owner: "n" + sub, Next: now.Add(d()), Max: 1 + r.IntN(2), Reason: "x"}
	case 7:
		return Op{Kind: OpRequeue, Key: k, Now: now}
	case 8:
		return Op{Kind: OpDeleteExpired, Cutoff: now.Add(-d()), Now: now}
	case 9:
		return Op{Kind: OpTrimPerSubscriber, Max: r.IntN(3), Now: now}
	case 10:
		return Op{Kind: OpRecordDelivered, App: sub, Source: "r", Items: []impl.DeliveredItem{{ID: ev, Version: now.String()}}}
	case 11:
		return Op{Kind: OpRecordDelivered, App: sub, Source: "r", Deleted: []string{ev}}
	}
	return Op{Kind: OpMarkProcessed, Sub: sub, EventID: ev, Now: now, Window: 1 + d()}
}

// Value semantics are what let rapid and porcupine keep old states: no op
// may change the state it was applied to.
func TestOpsNeverMutateTheirReceiver(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s Store
	now := t0
	for i := 0; i < 3000; i++ {
		now = now.Add(time.Duration(r.IntN(2)) * time.Second)
		op := randomOp(r, now)
		before := s.String()
		next, res := op.Apply(s)
		require.Equal(t, before, s.String(), "step %d: %s mutated its receiver", i, op)
		// Results must not alias the state either.
		for j := range res.Messages {
			if len(res.Messages[j].Payload) > 0 {
				res.Messages[j].Payload[0] ^= 0xff
			}
		}
		after := next.String()
		for j := range res.Messages {
			if len(res.Messages[j].Payload) > 0 {
				res.Messages[j].Payload[0] ^= 0xff
			}
		}
		require.Equal(t, after, next.String())
		s = next
	}
}

func TestEqualHashAndStringAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var states []Store
	var s Store
	for i := 0; i < 400; i++ {
		s, _ = randomOp(r, at(time.Duration(i/4)*time.Second)).Apply(s)
		states = append(states, s)
	}
	for i := 0; i < len(states); i += 7 {
		for j := 0; j < len(states); j += 5 {
			a, b := states[i], states[j]
			require.Equal(t, a.String() == b.String(), a.Equal(b), "Equal must agree with the canonical String (%d, %d)", i, j)
			if a.Equal(b) {
				require.Equal(t, a.Hash(), b.Hash())
			}
		}
	}
	emptied := Store{}.RecordDelivered("app", "src", []impl.DeliveredItem{{ID: "x", Version: "1"}}, nil).RecordDelivered("app", "src", nil, []string{"x"})
	require.True(t, emptied.Equal(Store{}), "a state emptied again equals the zero Store")
	acked, _ := Store{}.Enqueue([]impl.Message{msg("a", "e", t0)})
	acked, _ = acked.Ack([]impl.MessageKey{mk("a", "e")})
	require.True(t, acked.Equal(Store{}))
}

func TestAdvanceCursorsIsConditionalAndOrdered(t *testing.T) {
	c := func(major int64, tok string) impl.Cursor {
		return impl.Cursor{Key: impl.CursorKey{Stream: "s"}, Pos: impl.Position{Major: major}, Token: []byte(tok)}
	}
	s, w := Store{}.AdvanceCursors([]impl.Cursor{c(2, "two"), c(1, "one"), c(2, "two-again"), c(3, "three")})
	require.Equal(t, []bool{true, false, false, true}, w)
	got, ok := s.GetCursor(impl.CursorKey{Stream: "s"})
	require.True(t, ok)
	require.Equal(t, "three", string(got.Token))
	s = s.PutCursorBlind(c(0, "blind"))
	got, _ = s.GetCursor(impl.CursorKey{Stream: "s"})
	require.Equal(t, int64(0), got.Pos.Major, "the blind write regresses the cursor: that is its bug")
}

func TestEnqueueFirstWinsAndResetsFields(t *testing.T) {
	in := msg("a", "e", t0)
	in.Attempts, in.Dead, in.LeaseOwner = 3, true, "x"
	dup := msg("a", "e", at(time.Second))
	s, n := Store{}.Enqueue([]impl.Message{in, dup})
	require.Equal(t, 1, n)
	got := s.ListMessages("a")
	require.Len(t, got, 1)
	require.Equal(t, t0, got[0].CreatedAt, "the first of a repeated key wins")
	require.Equal(t, t0, got[0].NextAttemptAt)
	require.Zero(t, got[0].Attempts)
	require.False(t, got[0].Dead)
	require.Empty(t, got[0].LeaseOwner)
}

func TestClaimFailDeadRequeue(t *testing.T) {
	s, _ := Store{}.Enqueue([]impl.Message{msg("a", "e2", t0), msg("a", "e1", t0), msg("b", "e0", t0)})
	s, got := s.Claim(impl.ClaimRequest{Owner: "n1", Now: t0, Lease: 10 * time.Second, Limit: 2})
	require.Equal(t, []string{"a/e1", "a/e2"}, evs(got), "QueueOrder: subscriber, CreatedAt, EventID")
	_, got = s.Claim(impl.ClaimRequest{Owner: "n2", Now: at(10*time.Second - 1), Lease: time.Second, Limit: 5})
	require.Equal(t, []string{"b/e0"}, evs(got), "active leases are skipped")
	_, got = s.Claim(impl.ClaimRequest{Owner: "n2", Now: at(10 * time.Second), Lease: time.Second, Limit: 5})
	require.Equal(t, []string{"a/e1", "a/e2", "b/e0"}, evs(got), "LeaseUntil == now has expired")

	_, _, ok := s.Fail(mk("a", "e1"), "n2", at(time.Second), 1, "stale")
	require.False(t, ok, "n2 does not hold the lease")
	_, _, ok = s.Fail(mk("b", "e0"), "", at(time.Second), 1, "nobody")
	require.False(t, ok, "the empty owner holds no lease")
	s, m, ok := s.Fail(mk("a", "e1"), "n1", at(5*time.Second), 1, "boom")
	require.True(t, ok)
	require.True(t, m.Dead)
	require.Equal(t, 1, m.Attempts)
	require.Equal(t, at(5*time.Second), m.NextAttemptAt, "a dead message keeps nextAttempt")
	require.Zero(t, m.LeaseUntil)
	require.Empty(t, m.LeaseOwner)

	s, ok = s.Requeue(mk("a", "e1"), at(time.Minute))
	require.True(t, ok)
	m = s.ListMessages("a")[0]
	require.False(t, m.Dead)
	require.Zero(t, m.Attempts)
	require.Equal(t, at(time.Minute), m.NextAttemptAt)
	require.Equal(t, "boom", m.LastError, "Requeue keeps the last error")
	_, ok = s.Requeue(mk("a", "e1"), at(time.Minute))
	require.False(t, ok, "only dead messages are requeued")
}

func TestRetentionRules(t *testing.T) {
	s, _ := Store{}.Enqueue([]impl.Message{
		msg("a", "old", at(-1)), msg("a", "edge", t0), msg("a", "leased", at(-time.Hour)),
		msg("b", "b1", at(time.Second)), msg("b", "b2", at(2*time.Second)), msg("b", "b3", at(3*time.Second)), msg("b", "b4", at(4*time.Second)),
	})
	s, _ = s.Claim(impl.ClaimRequest{Subscriber: "a", Owner: "n", Now: t0, Lease: time.Minute, Limit: 1})
	require.Equal(t, "leased", s.ListMessages("a")[0].EventID)
	expired, n := s.DeleteExpired(t0, at(time.Minute-1))
	require.Equal(t, 1, n, "only 'old': 'edge' has CreatedAt == cutoff, 'leased' is being delivered")
	require.Equal(t, []string{"a/leased", "a/edge"}, evs(expired.ListMessages("a")))
	_, n = s.DeleteExpired(t0, at(time.Minute))
	require.Equal(t, 2, n, "once the lease ends at now, 'leased' expires too")

	s, _ = s.Claim(impl.ClaimRequest{Subscriber: "b", Owner: "n", Now: at(4 * time.Second), Lease: time.Minute, Limit: 1})
	trimmed, n := s.TrimPerSubscriber(2, at(5*time.Second))
	require.Equal(t, 1+2, n, "a: 3 -> 2 (old goes, leased stays); b: 4 -> 2 deleting b2, b3 (b1 is leased)")
	require.Equal(t, []string{"a/leased", "a/edge", "b/b1", "b/b4"}, evs(trimmed.ListMessages("")))
}

func TestMarkProcessedWindow(t *testing.T) {
	w := 10 * time.Second
	s, ok := Store{}.MarkProcessed("a", "e", t0, w)
	require.True(t, ok)
	s, ok = s.MarkProcessed("a", "e", at(9*time.Second), w)
	require.False(t, ok)
	s, ok = s.MarkProcessed("a", "e", at(10*time.Second), w)
	require.True(t, ok, "last seen at exactly now - window has expired")
	_, ok = s.MarkProcessed("a", "e", at(19*time.Second), w)
	require.False(t, ok)
}

func TestRecordDeliveredOrder(t *testing.T) {
	s := Store{}.RecordDelivered("app", "src", []impl.DeliveredItem{{ID: "b", Version: "1"}, {ID: "a", Version: "1"}, {ID: "b", Version: "2"}}, []string{"zz"})
	require.Equal(t, []impl.DeliveredItem{{ID: "a", Version: "1"}, {ID: "b", Version: "2"}}, s.GetDelivered("app", "src"))
	require.Empty(t, s.GetDelivered("other", "src"))
}

func TestResultNormalizeAndEqual(t *testing.T) {
	zone := time.FixedZone("x", 3600)
	a := Result{Messages: []impl.Message{{Payload: []byte{}, CreatedAt: t0.In(zone)}}, Written: []bool{}}
	b := Result{Messages: []impl.Message{{CreatedAt: t0}}}
	require.True(t, a.Equal(b), "empty vs nil slices and time zones do not matter")
	require.False(t, Result{N: 1}.Equal(Result{N: 2}))
	stale := Result{OK: false, Message: impl.Message{EventID: "leftover"}}
	require.True(t, stale.Equal(Result{}), "the message of a stale Fail is unspecified")
}

func TestPartition(t *testing.T) {
	c := func(stream string) impl.Cursor { return impl.Cursor{Key: impl.CursorKey{Stream: stream}} }
	require.Equal(t, `cursor("s","")`, Op{Kind: OpAdvanceCursors, Cursors: []impl.Cursor{c("s"), c("s")}}.Partition())
	require.Empty(t, Op{Kind: OpAdvanceCursors, Cursors: []impl.Cursor{c("s"), c("t")}}.Partition())
	require.Equal(t, `queue("a")`, Op{Kind: OpClaim, Claim: impl.ClaimRequest{Subscriber: "a"}}.Partition())
	require.Empty(t, Op{Kind: OpClaim}.Partition(), "a claim over all subscribers touches every queue")
	require.Equal(t, `queue("a")`, Op{Kind: OpFail, Key: mk("a", "e")}.Partition())
	require.Empty(t, Op{Kind: OpEnqueue, Messages: []impl.Message{msg("a", "e", t0), msg("b", "e", t0)}}.Partition())
	require.Empty(t, Op{Kind: OpDeleteExpired}.Partition())
	require.Equal(t, `dedup("a","e")`, Op{Kind: OpMarkProcessed, Sub: "a", EventID: "e"}.Partition())
	require.NotEqual(t, Op{Kind: OpGetDelivered, App: "a/b", Source: "c"}.Partition(), Op{Kind: OpGetDelivered, App: "a", Source: "b/c"}.Partition(),
		"partition keys must not collide when names contain the separator")
}
