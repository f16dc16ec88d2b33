package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// listStore is a store written the way an outside implementer would write
// one: from README.md, impl/store.go and the conformance package's
// documentation only, without reading impl/memstore. Every call holds one
// mutex from start to end, which is what makes it linearizable.
type listStore struct {
	mu        sync.Mutex
	closed    bool
	cursors   map[impl.CursorKey]impl.Cursor
	messages  map[impl.MessageKey]impl.Message
	delivered map[[2]string]map[string]string // (app, source) -> id -> version
	seen      map[[2]string]time.Time         // (subscriber, event) -> last first sight
}

func newListStore() *listStore {
	return &listStore{
		cursors:   map[impl.CursorKey]impl.Cursor{},
		messages:  map[impl.MessageKey]impl.Message{},
		delivered: map[[2]string]map[string]string{},
		seen:      map[[2]string]time.Time{},
	}
}

var errClosed = errors.New("liststore: closed")

// begin locks the store for one call, refusing a done context and a closed
// store (impl/store.go: either is an error and the call takes no effect).
func (s *listStore) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

// norm is how every instant is kept: impl.TimeOf(impl.NanosOf(t)).
func norm(t time.Time) time.Time { return impl.TimeOf(impl.NanosOf(t)) }

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}

func cloneMessage(m impl.Message) impl.Message { m.Payload = clone(m.Payload); return m }

func (s *listStore) GetCursor(ctx context.Context, key impl.CursorKey) (impl.Cursor, bool, error) {
	if err := s.begin(ctx); err != nil {
		return impl.Cursor{}, false, err
	}
	defer s.mu.Unlock()
	c, ok := s.cursors[key]
	c.Token = clone(c.Token)
	return c, ok, nil
}

func (s *listStore) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []impl.Cursor
	for _, c := range s.cursors {
		c.Token = clone(c.Token)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b impl.Cursor) int {
		switch {
		case a.Key.Less(b.Key):
			return -1
		case b.Key.Less(a.Key):
			return 1
		}
		return 0
	})
	return out, nil
}

func (s *listStore) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	written := make([]bool, len(cs))
	for i, c := range cs {
		old, ok := s.cursors[c.Key]
		if ok && c.Pos.Compare(old.Pos) <= 0 {
			continue
		}
		c.Token, c.UpdatedAt = clone(c.Token), norm(c.UpdatedAt)
		s.cursors[c.Key] = c
		written[i] = true
	}
	return written, nil
}

func (s *listStore) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for _, m := range msgs {
		if _, ok := s.messages[m.Key()]; ok {
			continue
		}
		s.messages[m.Key()] = impl.Message{
			Subscriber: m.Subscriber, EventID: m.EventID, Stream: m.Stream, Pos: m.Pos,
			Payload: clone(m.Payload), CreatedAt: norm(m.CreatedAt), NextAttemptAt: norm(m.CreatedAt),
		}
		n++
	}
	return n, nil
}

// inOrder lists the messages s holds that keep says to, in QueueOrder.
func (s *listStore) inOrder(keep func(impl.Message) bool) []impl.Message {
	var out []impl.Message
	for _, m := range s.messages {
		if keep(m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, impl.QueueCompare)
	return out
}

func leased(m impl.Message, now time.Time) bool { return m.LeaseUntil.After(now) }

func (s *listStore) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	due := s.inOrder(func(m impl.Message) bool {
		return !m.Dead && !m.NextAttemptAt.After(req.Now) && !leased(m, req.Now) &&
			(req.Subscriber == "" || m.Subscriber == req.Subscriber)
	})
	if len(due) > req.Limit {
		due = due[:max(req.Limit, 0)]
	}
	out := []impl.Message{}
	for _, m := range due {
		m.LeaseOwner, m.LeaseUntil = req.Owner, norm(req.Now.Add(req.Lease))
		s.messages[m.Key()] = m
		out = append(out, cloneMessage(m))
	}
	return out, nil
}

func (s *listStore) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for _, k := range keys {
		if _, ok := s.messages[k]; ok {
			delete(s.messages, k)
			n++
		}
	}
	return n, nil
}

func (s *listStore) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	if err := s.begin(ctx); err != nil {
		return impl.Message{}, false, err
	}
	defer s.mu.Unlock()
	m, ok := s.messages[req.Key]
	if !ok || m.LeaseOwner != req.Owner || m.LeaseOwner == "" {
		return impl.Message{}, false, nil
	}
	m.Attempts++
	m.LeaseOwner, m.LeaseUntil = "", time.Time{}
	m.LastError, m.NextAttemptAt = req.Reason, norm(req.NextAttempt)
	m.Dead = m.Attempts >= req.MaxAttempts
	s.messages[req.Key] = m
	return cloneMessage(m), true, nil
}

func (s *listStore) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	m, ok := s.messages[key]
	if !ok || !m.Dead {
		return false, nil
	}
	m.Dead, m.Attempts, m.NextAttemptAt = false, 0, norm(now)
	s.messages[key] = m
	return true, nil
}

func (s *listStore) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := s.inOrder(func(m impl.Message) bool { return subscriber == "" || m.Subscriber == subscriber })
	for i := range out {
		out[i] = cloneMessage(out[i])
	}
	return out, nil
}

func (s *listStore) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for k, m := range s.messages {
		if m.CreatedAt.Before(cutoff) && !leased(m, now) {
			delete(s.messages, k)
			n++
		}
	}
	return n, nil
}

func (s *listStore) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	// QueueOrder within a subscriber is (CreatedAt, EventID): oldest first.
	all := s.inOrder(func(impl.Message) bool { return true })
	count := map[string]int{}
	for _, m := range all {
		count[m.Subscriber]++
	}
	n := 0
	for _, m := range all {
		if count[m.Subscriber] > max && !leased(m, now) {
			delete(s.messages, m.Key())
			count[m.Subscriber]--
			n++
		}
	}
	return n, nil
}

func (s *listStore) GetDelivered(ctx context.Context, app, source string) ([]impl.DeliveredItem, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []impl.DeliveredItem
	for id, v := range s.delivered[[2]string{app, source}] {
		out = append(out, impl.DeliveredItem{ID: id, Version: v})
	}
	slices.SortFunc(out, func(a, b impl.DeliveredItem) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

func (s *listStore) RecordDelivered(ctx context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	k := [2]string{app, source}
	if s.delivered[k] == nil {
		s.delivered[k] = map[string]string{}
	}
	for _, it := range items {
		s.delivered[k][it.ID] = it.Version
	}
	for _, id := range deleted {
		delete(s.delivered[k], id)
	}
	return nil
}

func (s *listStore) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	k := [2]string{req.Subscriber, req.EventID}
	last, ok := s.seen[k]
	if ok && last.After(req.Now.Add(-req.Window)) {
		return false, nil
	}
	s.seen[k] = norm(req.Now)
	return true, nil
}

func (s *listStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
