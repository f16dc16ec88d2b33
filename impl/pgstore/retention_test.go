package pgstore_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// TestRetentionDropsAreCountedPerRule: each retention statement counts what
// it deleted, per subscriber and rule, and nothing else: an acknowledged
// message, a leased one and one young enough to stay are not counted.
func TestRetentionDropsAreCountedPerRule(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	msg := func(sub, id string, age time.Duration) impl.Message {
		return impl.Message{Subscriber: sub, EventID: id, Stream: "s", CreatedAt: t0.Add(-age), NextAttemptAt: t0}
	}
	msgs := []impl.Message{
		msg("a", "old-1", 10*time.Hour), msg("a", "old-2", 9*time.Hour), msg("a", "acked", 9*time.Hour),
		msg("a", "young-1", time.Minute), msg("a", "young-2", time.Second),
		msg("b", "b-1", 4*time.Minute), msg("b", "b-2", 3*time.Minute), msg("b", "b-3", 2*time.Minute), msg("b", "b-4", time.Minute),
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ack(ctx, []impl.MessageKey{{Subscriber: "a", EventID: "acked"}}); err != nil {
		t.Fatal(err)
	}
	// b-1 is leased: the cap may not delete it (it counts toward the cap).
	if _, err := s.Claim(ctx, impl.ClaimRequest{Subscriber: "b", Owner: "n", Now: t0, Lease: time.Hour, Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RetentionDrops(ctx); err != nil || len(got) != 0 {
		t.Fatalf("before any retention: RetentionDrops = %v, %v; want none", got, err)
	}
	if n, err := s.DeleteExpired(ctx, t0.Add(-time.Hour), t0); err != nil || n != 2 {
		t.Fatalf("DeleteExpired = %d, %v; want 2 (old-1, old-2)", n, err)
	}
	if n, err := s.TrimPerSubscriber(ctx, 2, t0); err != nil || n != 2 {
		t.Fatalf("TrimPerSubscriber(2) = %d, %v; want 2 (b-2, b-3: b-1 is leased)", n, err)
	}
	// A second pass deletes nothing and counts nothing.
	if n, err := s.DeleteExpired(ctx, t0.Add(-time.Hour), t0); err != nil || n != 0 {
		t.Fatalf("second DeleteExpired = %d, %v; want 0", n, err)
	}
	want := []impl.RetentionDrops{{Subscriber: "a", TTL: 2}, {Subscriber: "b", Cap: 2}}
	got, err := s.RetentionDrops(ctx)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("RetentionDrops = %+v, %v; want %+v", got, err, want)
	}
	if n, err := s.TrimPerSubscriber(ctx, 1, t0); err != nil || n != 2 {
		t.Fatalf("TrimPerSubscriber(1) = %d, %v; want 2 (a's young-1, b's b-4)", n, err)
	}
	want[0].Cap, want[1].Cap = 1, 3
	if got, err := s.RetentionDrops(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("RetentionDrops after a second trim = %+v, %v; want %+v", got, err, want)
	}
}

// TestRetentionOfSomeSubscribers: DeleteExpiredOf and TrimPerSubscriberOf
// touch (and count) only the subscribers named, and none for an empty list
// (the runtime's held-only scope with no bot held).
func TestRetentionOfSomeSubscribers(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	var msgs []impl.Message
	for _, sub := range []string{"held", "keyed"} {
		for i, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, time.Minute, time.Second} {
			msgs = append(msgs, impl.Message{Subscriber: sub, EventID: sub + "-" + string(rune('a'+i)), Stream: "s", CreatedAt: t0.Add(-age), NextAttemptAt: t0})
		}
	}
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpiredOf(ctx, nil, t0.Add(-time.Hour), t0); err != nil || n != 0 {
		t.Fatalf("DeleteExpiredOf(none) = %d, %v; want 0", n, err)
	}
	if n, err := s.TrimPerSubscriberOf(ctx, []string{}, 1, t0); err != nil || n != 0 {
		t.Fatalf("TrimPerSubscriberOf(none) = %d, %v; want 0", n, err)
	}
	if n, err := s.DeleteExpiredOf(ctx, []string{"held"}, t0.Add(-time.Hour), t0); err != nil || n != 2 {
		t.Fatalf("DeleteExpiredOf(held) = %d, %v; want 2", n, err)
	}
	if n, err := s.TrimPerSubscriberOf(ctx, []string{"held"}, 1, t0); err != nil || n != 1 {
		t.Fatalf("TrimPerSubscriberOf(held, 1) = %d, %v; want 1", n, err)
	}
	left, err := s.ListMessages(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range left {
		ids = append(ids, m.EventID)
	}
	if want := []string{"held-d", "keyed-a", "keyed-b", "keyed-c", "keyed-d"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("left %v; want %v (held keeps its newest, keyed untouched)", ids, want)
	}
	if got, err := s.RetentionDrops(ctx); err != nil || !reflect.DeepEqual(got, []impl.RetentionDrops{{Subscriber: "held", TTL: 2, Cap: 1}}) {
		t.Errorf("RetentionDrops = %+v, %v; want held's only", got, err)
	}
}
