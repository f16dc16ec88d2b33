package runtime

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// TestHeldOnlyRetention: with RetentionHeldOnly the runtime's retention
// calls touch only the bots whose key it has not seen published, as the
// registry answers it applied say: none before the first answer, the
// keyless bot after it, none once its key is published. The other bots'
// messages, however old, stay (a short TTL cannot cut a retry short).
func TestHeldOnlyRetention(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.NewStore(t)
	book := newBotBook(1)
	s := wrapStore(pg, 5*time.Second, func(string) {}, book.held)
	now := time.Now()
	enqueue := func(sub string, n int) {
		t.Helper()
		var msgs []impl.Message
		for i := range n {
			msgs = append(msgs, impl.Message{Subscriber: sub, EventID: sub + "-" + now.Add(time.Duration(i)).Format("150405.000000000"), Stream: "log-1",
				CreatedAt: now.Add(-time.Hour + time.Duration(i)*time.Second), NextAttemptAt: now})
		}
		if _, err := s.Enqueue(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("bot-0", 3)
	enqueue("bot-3", 3)
	retention := func() int {
		t.Helper()
		a, err := s.DeleteExpired(ctx, now.Add(-time.Minute), now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.TrimPerSubscriber(ctx, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		return a + b
	}
	if n := retention(); n != 0 {
		t.Fatalf("before the first registry answer retention deleted %d; want 0 (no bot is known to be held)", n)
	}
	secret := "c2VjcmV0"
	reg := protocol.Registry{Version: 1, Bots: []protocol.Bot{{ID: "bot-0", Secret: secret, HasKey: true}, {ID: "bot-3", Secret: secret}}}
	if _, err := book.load(reg); err != nil {
		t.Fatal(err)
	}
	if got := book.held(); !reflect.DeepEqual(got, []string{"bot-3"}) {
		t.Fatalf("held %v; want [bot-3]", got)
	}
	if n := retention(); n != 3 {
		t.Fatalf("retention deleted %d; want bot-3's 3 (all older than the TTL), none of bot-0's", n)
	}
	if left, _ := pg.ListMessages(ctx, "bot-0"); len(left) != 3 {
		t.Fatalf("bot-0 (has a key) kept %d of 3", len(left))
	}
	enqueue("bot-3", 2)
	reg.Version, reg.Bots[1].HasKey = 2, true
	if _, err := book.diff(reg); err != nil {
		t.Fatal(err)
	}
	if got := book.held(); len(got) != 0 {
		t.Fatalf("held %v after the key was published; want none", got)
	}
	if n := retention(); n != 0 {
		t.Fatalf("after bot-3's key was published retention deleted %d; want 0", n)
	}
	drops, err := pg.RetentionDrops(ctx)
	if err != nil || !reflect.DeepEqual(drops, []impl.RetentionDrops{{Subscriber: "bot-3", TTL: 3}}) {
		t.Errorf("RetentionDrops = %+v, %v; want bot-3's 3 by the TTL", drops, err)
	}
}

// TestHeldOnlyRetentionNeedsAScopingStore: Run refuses the held-only scope
// on a store that cannot limit retention to some bots, rather than
// dropping every bot's messages.
func TestHeldOnlyRetentionNeedsAScopingStore(t *testing.T) {
	err := Run(context.Background(), Options{Store: memstore.New(), Upstream: "http://127.0.0.1:1", Registry: "http://127.0.0.1:1", RetentionHeldOnly: true})
	if err == nil || !strings.Contains(err.Error(), "held") || !strings.Contains(err.Error(), "Postgres") {
		t.Fatalf("Run = %v; want a refusal naming the held-only scope and the Postgres store", err)
	}
}
