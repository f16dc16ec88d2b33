package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/model"
)

// The conformance suite (conformance/memstore_test.go) certifies memstore
// on a tiny key space. This test covers what a tiny key space cannot reach:
// long queues, so tombstone compaction, out-of-order inserts and queues
// emptied and recreated all happen, still checked call by call against the
// model.

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestDifferentialLongQueues(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, 12))
	st := memstore.New()
	defer st.Close()
	var m model.Store
	now := t0
	subs := []string{"s0", "s1", "s2", "s3"}
	nextEvent := 0
	var known []impl.MessageKey
	anyKey := func() impl.MessageKey {
		if len(known) == 0 {
			return impl.MessageKey{Subscriber: "s0", EventID: "none"}
		}
		return known[r.IntN(len(known))]
	}
	// The simulator keeps a listing while Version answers the same
	// (sim's observedStore.currentQueue): every call that changed the
	// listing must have moved it.
	listed, err := st.ListMessages(ctx, "")
	require.NoError(t, err)
	version := st.Version()
	for step := 0; step < 4000; step++ {
		now = now.Add(time.Duration(r.IntN(300)) * time.Millisecond)
		var op model.Op
		switch x := r.IntN(20); {
		case x < 7:
			var msgs []impl.Message
			for range 1 + r.IntN(20) {
				sub := subs[r.IntN(len(subs))]
				ev := fmt.Sprintf("e%05d", nextEvent)
				if r.IntN(5) == 0 && len(known) > 0 {
					k := anyKey() // a replayed event: must be ignored while present
					sub, ev = k.Subscriber, k.EventID
				}
				nextEvent++
				known = append(known, impl.MessageKey{Subscriber: sub, EventID: ev})
				// Mostly increasing CreatedAt, sometimes older: the insert path.
				created := now.Add(-time.Duration(r.IntN(3)) * time.Second)
				msgs = append(msgs, impl.Message{Subscriber: sub, EventID: ev, Stream: "x", Payload: []byte(ev), CreatedAt: created})
			}
			op = model.Op{Kind: model.OpEnqueue, Messages: msgs}
		case x < 10:
			sub := ""
			if r.IntN(2) == 0 {
				sub = subs[r.IntN(len(subs))]
			}
			op = model.Op{Kind: model.OpClaim, Claim: impl.ClaimRequest{Subscriber: sub, Owner: fmt.Sprint("n", r.IntN(2)), Now: now, Lease: time.Duration(r.IntN(3)) * time.Second, Limit: r.IntN(30)}}
		case x < 14:
			var ks []impl.MessageKey
			for range 1 + r.IntN(15) {
				ks = append(ks, anyKey())
			}
			op = model.Op{Kind: model.OpAck, Keys: ks}
		case x < 16:
			op = model.Op{Kind: model.OpFail, Key: anyKey(), Owner: fmt.Sprint("n", r.IntN(2)), Next: now.Add(time.Second), Max: 2, Reason: "e"}
		case x == 16:
			op = model.Op{Kind: model.OpRequeue, Key: anyKey(), Now: now}
		case x == 17:
			op = model.Op{Kind: model.OpDeleteExpired, Cutoff: now.Add(-10 * time.Second), Now: now}
		case x == 18:
			op = model.Op{Kind: model.OpTrimPerSubscriber, Max: 20 + r.IntN(40), Now: now}
		default:
			op = model.Op{Kind: model.OpListMessages, Sub: subs[r.IntN(len(subs))]}
		}
		got, err := op.Exec(ctx, st)
		require.NoError(t, err)
		var want model.Result
		m, want = op.Apply(m)
		require.True(t, want.Equal(got), "step %d %s\n got: %s\nwant: %s", step, op, got.Format(op.Kind), want.Format(op.Kind))
		all, err := st.ListMessages(ctx, "")
		require.NoError(t, err)
		if v := st.Version(); !(model.Result{Messages: listed}.Equal(model.Result{Messages: all})) && v == version {
			t.Fatalf("step %d %s changed the queue but not Version (%d)", step, op, v)
		}
		listed, version = all, st.Version()
		if step%50 == 0 {
			all, err := st.ListMessages(ctx, "")
			require.NoError(t, err)
			require.True(t, model.Result{Messages: m.ListMessages("")}.Equal(model.Result{Messages: all}), "state diverged at step %d", step)
		}
	}
}

func TestClosedAndCancelled(t *testing.T) {
	st := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Enqueue(ctx, []impl.Message{{Subscriber: "a", EventID: "e"}})
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, st.Close())
	_, err = st.ListCursors(context.Background())
	require.ErrorIs(t, err, memstore.ErrClosed)
}

func BenchmarkEnqueueClaimAck(b *testing.B) {
	ctx := context.Background()
	st := memstore.New()
	const batch = 256
	msgs := make([]impl.Message, batch)
	keys := make([]impl.MessageKey, batch)
	payload := []byte(`{"event":"x"}`)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		now := t0.Add(time.Duration(n) * time.Millisecond)
		for i := range msgs {
			msgs[i] = impl.Message{Subscriber: "bot", EventID: fmt.Sprint(n*batch + i), Payload: payload, CreatedAt: now}
			keys[i] = msgs[i].Key()
		}
		if _, err := st.Enqueue(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		claimed, err := st.Claim(ctx, impl.ClaimRequest{Subscriber: "bot", Owner: "n", Now: now, Lease: time.Second, Limit: batch})
		if err != nil || len(claimed) != batch {
			b.Fatalf("claimed %d, err %v", len(claimed), err)
		}
		if _, err := st.Ack(ctx, keys); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkAdvanceCursor(b *testing.B) {
	ctx := context.Background()
	st := memstore.New()
	c := []impl.Cursor{{Key: impl.CursorKey{Stream: "stream"}, Token: []byte("cookie")}}
	var i int64
	for b.Loop() {
		i++
		c[0].Pos.Major = i
		if _, err := st.AdvanceCursors(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// GetMessage is a point read of what ListMessages lists: for every key
// ever enqueued, it finds exactly the listed message (payload included),
// and nothing for an acked or never-enqueued key.
func TestGetMessageAgreesWithListMessages(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	now := time.Unix(1_700_000_000, 0)
	var keys []impl.MessageKey
	for i := range 40 {
		m := impl.Message{Subscriber: fmt.Sprintf("bot-%d", i%3), EventID: fmt.Sprintf("ev-%02d", i), Stream: "s", Payload: []byte{byte(i)}, CreatedAt: now.Add(time.Duration(i%7) * time.Second)}
		keys = append(keys, impl.MessageKey{Subscriber: m.Subscriber, EventID: m.EventID})
		_, err := s.Enqueue(ctx, []impl.Message{m})
		require.NoError(t, err)
	}
	_, err := s.Ack(ctx, keys[:10])
	require.NoError(t, err)
	_, err = s.Claim(ctx, impl.ClaimRequest{Subscriber: "bot-1", Owner: "n", Now: now, Lease: time.Minute, Limit: 3})
	require.NoError(t, err)
	listed, err := s.ListMessages(ctx, "")
	require.NoError(t, err)
	want := map[impl.MessageKey]impl.Message{}
	for _, m := range listed {
		want[impl.MessageKey{Subscriber: m.Subscriber, EventID: m.EventID}] = m
	}
	require.Len(t, want, 30)
	for _, k := range append(keys, impl.MessageKey{Subscriber: "bot-0", EventID: "never"}) {
		got, ok, err := s.GetMessage(ctx, k)
		require.NoError(t, err)
		w, listedOK := want[k]
		require.Equal(t, listedOK, ok, "key %v", k)
		require.Equal(t, w, got, "key %v", k)
		shared, sharedOK, err := s.GetMessageShared(ctx, k)
		require.NoError(t, err)
		require.Equal(t, ok, sharedOK, "key %v", k)
		require.Equal(t, got, shared, "key %v", k)
	}
	for _, sub := range []string{"", "bot-1", "none"} {
		copied, err := s.ListMessages(ctx, sub)
		require.NoError(t, err)
		shared, err := s.ListMessagesShared(ctx, sub)
		require.NoError(t, err)
		require.Equal(t, copied, shared, "subscriber %q", sub)
	}
	require.NoError(t, s.Close())
	_, _, err = s.GetMessage(ctx, keys[20])
	require.ErrorIs(t, err, memstore.ErrClosed)
	_, err = s.ListMessagesShared(ctx, "")
	require.ErrorIs(t, err, memstore.ErrClosed)
	_, _, err = s.GetMessageShared(ctx, keys[20])
	require.ErrorIs(t, err, memstore.ErrClosed)
}

// The two hand-off writes are not among the differential test's calls:
// each must move Version when it changes the queue, as every write does.
func TestVersionMovesOnHandOffWrites(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	msg := func(ev string) impl.Message {
		return impl.Message{Subscriber: "s0", EventID: ev, Stream: "x", Payload: []byte(ev), CreatedAt: t0}
	}
	v0 := st.Version()
	_, err := st.EnqueueLeased(ctx, []impl.Message{msg("e1")})
	require.NoError(t, err)
	v1 := st.Version()
	require.NotEqual(t, v0, v1, "EnqueueLeased inserted a row without moving Version")
	_, err = st.WriteHandOff(ctx, impl.HandOffWrite{Ack: []impl.MessageKey{{Subscriber: "s0", EventID: "e1"}}, Enqueue: []impl.Message{msg("e2")}})
	require.NoError(t, err)
	v2 := st.Version()
	require.NotEqual(t, v1, v2, "WriteHandOff acked and inserted without moving Version")
	_, err = st.ListMessages(ctx, "")
	require.NoError(t, err)
	n, err := st.DeleteExpired(ctx, t0.Add(-time.Hour), t0)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, v2, st.Version(), "a read and a cleanup that deleted nothing moved Version")
}
