package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// TestObserveHandler: the observation endpoint reports, from the store,
// each stream's lowest durable cursor (the resume point), every dead
// letter with its attempts, and the live queue's depth; "none" is [], not
// absent (absent means "not exposed" to certification).
func TestObserveHandler(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	if _, err := s.AdvanceCursors(ctx, []impl.Cursor{
		{Key: impl.CursorKey{Stream: "log-1"}, Pos: impl.Position{Major: 79, Minor: 3}},
		{Key: impl.CursorKey{Stream: "log-1", Subscriber: "bot-2"}, Pos: impl.Position{Major: 70, Minor: 1}},
		{Key: impl.CursorKey{Stream: "ts-1"}, Pos: impl.Position{Major: 1700000000000, ID: "ev-9"}},
		// A backfilling join's markers (impl/engine/joins.go) are no stream's
		// resume point: reported, they would name streams that do not exist.
		{Key: impl.CursorKey{Stream: "join/log-1", Subscriber: "bot-2#0"}, Pos: impl.Position{Major: 1}},
		{Key: impl.CursorKey{Stream: "need/log-1", Subscriber: "bot-2#0"}, Pos: impl.Position{Major: 2}},
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.Enqueue(ctx, []impl.Message{
		{Subscriber: "bot-1", EventID: "ev-1", Stream: "log-1", CreatedAt: now},
		{Subscriber: "bot-3", EventID: "ev-2", Stream: "log-1", CreatedAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	// Two failed attempts of ev-1 with a limit of two: a dead letter.
	for range 2 {
		if _, err := s.Claim(ctx, impl.ClaimRequest{Subscriber: "bot-1", Owner: "n", Now: now, Lease: time.Minute, Limit: 1}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Fail(ctx, impl.FailRequest{Key: impl.MessageKey{Subscriber: "bot-1", EventID: "ev-1"}, Owner: "n", NextAttempt: now, MaxAttempts: 2}); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	ObserveHandler(s, time.Second, Plants{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ObservePath, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var o protocol.Observation
	if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	want := map[string]impl.Position{"log-1": {Major: 70, Minor: 1}, "ts-1": {Major: 1700000000000, ID: "ev-9"}}
	if len(o.Cursors) != 2 {
		t.Errorf("cursors %+v; want one per stream", o.Cursors)
	}
	for _, c := range o.Cursors {
		if c.Pos.Pos() != want[c.Stream] {
			t.Errorf("%s at %+v; want %+v (the lowest)", c.Stream, c.Pos, want[c.Stream])
		}
	}
	if len(o.DeadLetters) != 1 || o.DeadLetters[0] != (protocol.DeadLetter{Bot: "bot-1", Event: "ev-1", Attempts: 2}) {
		t.Errorf("dead letters %+v", o.DeadLetters)
	}
	if o.QueueDepth == nil || *o.QueueDepth != 1 {
		t.Errorf("queue depth %v; want 1", *o.QueueDepth)
	}

	empty := httptest.NewRecorder()
	ObserveHandler(memstore.New(), time.Second, Plants{}).ServeHTTP(empty, httptest.NewRequest(http.MethodGet, ObservePath, nil))
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(empty.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["cursors"]) != "[]" || string(raw["dead_letters"]) != "[]" {
		t.Errorf("an empty store: %s; want [] for none", empty.Body)
	}
}

// TestObserveReportsRetentionDrops: a store that counts its retention drops
// (pgstore) has them on the endpoint per bot and rule, [] before any; one
// that does not (memstore) leaves the field null: not reported.
func TestObserveReportsRetentionDrops(t *testing.T) {
	ctx := context.Background()
	get := func(s impl.Store) (protocol.Observation, map[string]json.RawMessage) {
		t.Helper()
		rec := httptest.NewRecorder()
		ObserveHandler(s, 5*time.Second, Plants{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ObservePath, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var o protocol.Observation
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		return o, raw
	}
	if _, raw := get(memstore.New()); string(raw["retention_drops"]) != "null" {
		t.Errorf("memstore counts no drops, yet retention_drops = %s; want null (not reported)", raw["retention_drops"])
	}

	s := pgtest.NewStore(t)
	if _, raw := get(s); string(raw["retention_drops"]) != "[]" {
		t.Errorf("before any retention: retention_drops = %s; want []", raw["retention_drops"])
	}
	now := time.Now()
	var msgs []impl.Message
	for i := range 5 {
		msgs = append(msgs, impl.Message{Subscriber: "bot-3", EventID: fmt.Sprintf("ev-%d", i), Stream: "log-1", CreatedAt: now.Add(time.Duration(i-10) * time.Minute), NextAttemptAt: now})
	}
	msgs = append(msgs, impl.Message{Subscriber: "bot-1", EventID: "ev-9", Stream: "log-1", CreatedAt: now, NextAttemptAt: now})
	if _, err := s.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpired(ctx, now.Add(-8*time.Minute), now); err != nil || n != 2 {
		t.Fatalf("DeleteExpired = %d, %v; want 2", n, err)
	}
	if n, err := s.TrimPerSubscriber(ctx, 1, now); err != nil || n != 2 {
		t.Fatalf("TrimPerSubscriber = %d, %v; want 2", n, err)
	}
	o, _ := get(s)
	want := []protocol.RetentionDrop{{Bot: "bot-3", TTL: 2, Cap: 2}}
	if !reflect.DeepEqual(o.RetentionDrops, want) {
		t.Errorf("retention_drops = %+v; want %+v", o.RetentionDrops, want)
	}
	if o.QueueDepth == nil || *o.QueueDepth != 2 {
		t.Errorf("queue depth %v; want 2 (bot-3's newest, bot-1's)", o.QueueDepth)
	}
}
