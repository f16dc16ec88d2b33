// Package memstore is the embedded default backend: the whole impl.Store
// contract in process memory, behind one mutex.
//
// It is built for replay benchmarks, so the hot paths avoid scanning the
// whole store: messages live in one queue per subscriber, kept sorted in
// QueueOrder, so Claim for a subscriber reads only that subscriber's queue
// from the front, DeleteExpired stops at the first young message, and Trim
// touches only over-cap subscribers. Deleted entries become tombstones that
// are compacted away in bulk, so an Ack costs a map delete, not a slice copy.
//
// Every instant is stored as Unix nanoseconds and read back through
// impl.TimeOf, so values compare == with every other backend's. Inputs and
// outputs never share memory with the store.
package memstore

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("memstore: store is closed; create a new one with memstore.New")

// Store is the in-memory impl.Store. The zero value is not usable; call New.
type Store struct {
	mu        sync.Mutex
	closed    bool
	cursors   map[impl.CursorKey]impl.Cursor
	messages  map[impl.MessageKey]*entry
	queues    map[string]*queue
	subs      []string // subscribers with a queue, sorted: Claim("") and ListMessages("") walk them in QueueOrder
	delivered map[appSource]map[string]string
	processed map[impl.MessageKey]int64
	version   uint64 // see Version
}

var (
	_ impl.Store             = (*Store)(nil)
	_ impl.BlindCursorWriter = (*Store)(nil)
	_ impl.LeasingEnqueuer   = (*Store)(nil)
	_ impl.HandOffWriter     = (*Store)(nil)
)

type appSource struct{ app, source string }

// entry is one stored message. The nanosecond copies of its instants keep
// comparisons on the hot path free of time.Time arithmetic.
type entry struct {
	msg        impl.Message // instants normalised; Payload owned by the store
	created    int64
	next       int64
	leaseUntil int64
	gone       bool // deleted: a tombstone until the queue is compacted
}

func (e *entry) less(o *entry) bool {
	if e.created != o.created {
		return e.created < o.created
	}
	return e.msg.EventID < o.msg.EventID
}

// queue is one subscriber's messages in QueueOrder, tombstones included.
type queue struct {
	items []*entry
	live  int
}

// New returns an empty store.
func New() *Store {
	return &Store{
		cursors:   map[impl.CursorKey]impl.Cursor{},
		messages:  map[impl.MessageKey]*entry{},
		queues:    map[string]*queue{},
		delivered: map[appSource]map[string]string{},
		processed: map[impl.MessageKey]int64{},
	}
}

func norm(t time.Time) time.Time { return impl.TimeOf(impl.NanosOf(t)) }

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

func cloneCursor(c impl.Cursor) impl.Cursor {
	c.Token = cloneBytes(c.Token)
	return c
}

func (e *entry) out() impl.Message {
	m := e.msg
	m.Payload = cloneBytes(m.Payload)
	return m
}

// lock takes the mutex unless the call is already dead; the caller must
// unlock only when err is nil.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// writeLock is lock for a call that may change the message queue: it
// moves Version.
func (s *Store) writeLock(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.version++
	return nil
}

// GetCursor implements impl.Store.
func (s *Store) GetCursor(ctx context.Context, key impl.CursorKey) (impl.Cursor, bool, error) {
	if err := s.lock(ctx); err != nil {
		return impl.Cursor{}, false, err
	}
	defer s.mu.Unlock()
	c, ok := s.cursors[key]
	if !ok {
		return impl.Cursor{}, false, nil
	}
	return cloneCursor(c), true, nil
}

// ListCursors implements impl.Store.
func (s *Store) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]impl.Cursor, 0, len(s.cursors))
	for _, c := range s.cursors {
		out = append(out, cloneCursor(c))
	}
	slices.SortFunc(out, func(a, b impl.Cursor) int {
		if c := strings.Compare(a.Key.Stream, b.Key.Stream); c != 0 {
			return c
		}
		return strings.Compare(a.Key.Subscriber, b.Key.Subscriber)
	})
	return out, nil
}

func (s *Store) putCursor(c impl.Cursor) {
	c.Token = cloneBytes(c.Token)
	c.UpdatedAt = norm(c.UpdatedAt)
	s.cursors[c.Key] = c
}

// AdvanceCursors implements impl.Store.
func (s *Store) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.advance(cs), nil
}

func (s *Store) advance(cs []impl.Cursor) []bool {
	written := make([]bool, len(cs))
	for i, c := range cs {
		old, ok := s.cursors[c.Key]
		if ok && c.Pos.Compare(old.Pos) <= 0 {
			continue
		}
		s.putCursor(c)
		written[i] = true
	}
	return written
}

// PutCursorBlind implements impl.BlindCursorWriter: the known-bug write.
func (s *Store) PutCursorBlind(ctx context.Context, c impl.Cursor) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.putCursor(c)
	return nil
}

// Enqueue implements impl.Store.
func (s *Store) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	if err := s.writeLock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.insertAll(msgs, false, nil), nil
}

// EnqueueLeased implements impl.LeasingEnqueuer.
func (s *Store) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	if err := s.writeLock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	inserted := make([]bool, len(msgs))
	s.insertAll(msgs, true, inserted)
	return inserted, nil
}

// insertAll is Enqueue (leased false) and EnqueueLeased (leased true, which
// keeps a given LeaseOwner and LeaseUntil). A replay batch is large, so the
// entries and their payload copies each come from one allocation per call,
// and the subscriber's queue is looked up once per run of its messages; an
// entry keeps its whole block alive until every entry of the block is gone,
// which a queue that drains in order makes short.
func (s *Store) insertAll(msgs []impl.Message, leased bool, inserted []bool) int {
	size := 0
	for i := range msgs {
		size += len(msgs[i].Payload)
	}
	block := make([]entry, len(msgs))
	buf := make([]byte, 0, size)
	var q *queue
	qsub := ""
	n := 0
	for i := range msgs {
		in := &msgs[i]
		k := in.Key()
		if _, ok := s.messages[k]; ok {
			continue
		}
		created := impl.NanosOf(in.CreatedAt)
		createdAt := impl.TimeOf(created)
		var payload []byte
		if len(in.Payload) > 0 {
			start := len(buf)
			buf = append(buf, in.Payload...)
			// Capped, so an append to one payload can never spill into the next.
			payload = buf[start:len(buf):len(buf)]
		}
		e := &block[i]
		*e = entry{
			msg: impl.Message{
				Subscriber:    in.Subscriber,
				EventID:       in.EventID,
				Stream:        in.Stream,
				Pos:           in.Pos,
				Payload:       payload,
				CreatedAt:     createdAt,
				NextAttemptAt: createdAt,
			},
			created: created,
			next:    created,
		}
		if leased && in.LeaseOwner != "" {
			e.leaseUntil = impl.NanosOf(in.LeaseUntil)
			e.msg.LeaseOwner = in.LeaseOwner
			e.msg.LeaseUntil = impl.TimeOf(e.leaseUntil)
		}
		s.messages[k] = e
		if q == nil || qsub != in.Subscriber {
			q, qsub = s.queueFor(in.Subscriber), in.Subscriber
		}
		q.insert(e)
		if inserted != nil {
			inserted[i] = true
		}
		n++
	}
	return n
}

func (s *Store) queueFor(sub string) *queue {
	q, ok := s.queues[sub]
	if !ok {
		q = &queue{}
		s.queues[sub] = q
		i, _ := slices.BinarySearch(s.subs, sub)
		s.subs = slices.Insert(s.subs, i, sub)
	}
	return q
}

// insert keeps items sorted. Engines enqueue in roughly CreatedAt order, so
// the append branch is the common one.
func (q *queue) insert(e *entry) {
	q.live++
	n := len(q.items)
	if n == 0 || q.items[n-1].less(e) {
		q.items = append(q.items, e)
		return
	}
	i, _ := slices.BinarySearchFunc(q.items, e, func(a, b *entry) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
	q.items = slices.Insert(q.items, i, e)
}

// remove deletes e from the store; the queue keeps a tombstone until
// compact runs.
func (s *Store) remove(q *queue, e *entry) {
	e.gone = true
	q.live--
	s.version++
	delete(s.messages, e.msg.Key())
}

// compact drops tombstones once they outnumber live entries (amortised
// O(1) per delete) and forgets empty queues.
func (s *Store) compact(sub string, q *queue) {
	if q.live == 0 {
		delete(s.queues, sub)
		if i, ok := slices.BinarySearch(s.subs, sub); ok {
			s.subs = slices.Delete(s.subs, i, i+1)
		}
		return
	}
	if tomb := len(q.items) - q.live; tomb < 32 || tomb < q.live {
		return
	}
	kept := make([]*entry, 0, q.live)
	for _, e := range q.items {
		if !e.gone {
			kept = append(kept, e)
		}
	}
	q.items = kept
}

// Claim implements impl.Store.
func (s *Store) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	if err := s.writeLock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if req.Limit <= 0 {
		return nil, nil
	}
	now := impl.NanosOf(req.Now)
	until := now + int64(req.Lease)
	var out []impl.Message
	claimFrom := func(q *queue) {
		for _, e := range q.items {
			if len(out) >= req.Limit {
				return
			}
			if e.gone || e.msg.Dead || e.next > now || e.leaseUntil > now {
				continue
			}
			e.leaseUntil = until
			e.msg.LeaseUntil = impl.TimeOf(until)
			e.msg.LeaseOwner = req.Owner
			out = append(out, e.out())
		}
	}
	// Sized for the most the claim can return, so appending never grows it.
	if req.Subscriber != "" {
		if q, ok := s.queues[req.Subscriber]; ok {
			out = make([]impl.Message, 0, min(req.Limit, q.live))
			claimFrom(q)
		}
		return out, nil
	}
	out = make([]impl.Message, 0, min(req.Limit, len(s.messages)))
	for _, sub := range s.subs {
		if len(out) >= req.Limit {
			break
		}
		claimFrom(s.queues[sub])
	}
	return out, nil
}

// Ack implements impl.Store.
func (s *Store) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	if err := s.writeLock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.ack(keys), nil
}

func (s *Store) ack(keys []impl.MessageKey) int {
	// Acks come in runs of one subscriber's keys: look its queue up once
	// per run and compact once when the run ends.
	var q *queue
	qsub := ""
	n := 0
	for _, k := range keys {
		e, ok := s.messages[k]
		if !ok {
			continue
		}
		if q == nil || qsub != k.Subscriber {
			if q != nil {
				s.compact(qsub, q)
			}
			q, qsub = s.queues[k.Subscriber], k.Subscriber
		}
		s.remove(q, e)
		n++
	}
	if q != nil {
		s.compact(qsub, q)
	}
	return n
}

// WriteHandOff implements impl.HandOffWriter: Ack, EnqueueLeased and
// AdvanceCursors under one hold of the lock.
func (s *Store) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	if err := s.writeLock(ctx); err != nil {
		return impl.HandOffResult{}, err
	}
	defer s.mu.Unlock()
	r := impl.HandOffResult{Acked: s.ack(w.Ack)}
	if len(w.Enqueue) > 0 {
		r.Inserted = make([]bool, len(w.Enqueue))
		s.insertAll(w.Enqueue, true, r.Inserted)
	}
	if len(w.Cursors) > 0 {
		r.Written = s.advance(w.Cursors)
	}
	return r, nil
}

// Fail implements impl.Store. The empty owner never holds a lease.
func (s *Store) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	key, owner, nextAttempt, maxAttempts, reason := req.Key, req.Owner, req.NextAttempt, req.MaxAttempts, req.Reason
	if err := s.writeLock(ctx); err != nil {
		return impl.Message{}, false, err
	}
	defer s.mu.Unlock()
	e, ok := s.messages[key]
	if !ok || owner == "" || e.msg.LeaseOwner != owner {
		return impl.Message{}, false, nil
	}
	e.msg.Attempts++
	e.msg.LeaseOwner = ""
	e.msg.LeaseUntil = time.Time{}
	e.leaseUntil = 0
	e.msg.LastError = reason
	e.next = impl.NanosOf(nextAttempt)
	e.msg.NextAttemptAt = impl.TimeOf(e.next)
	if e.msg.Attempts >= maxAttempts {
		e.msg.Dead = true
	}
	return e.out(), true, nil
}

// Requeue implements impl.Store.
func (s *Store) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	if err := s.writeLock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	e, ok := s.messages[key]
	if !ok || !e.msg.Dead {
		return false, nil
	}
	e.msg.Dead = false
	e.msg.Attempts = 0
	e.next = impl.NanosOf(now)
	e.msg.NextAttemptAt = impl.TimeOf(e.next)
	return true, nil
}

// GetMessage returns one live message by key: a point read for observers
// (the simulator's store observer) that would otherwise list and copy a
// subscriber's whole queue to find one row. Not part of impl.Store.
func (s *Store) GetMessage(ctx context.Context, key impl.MessageKey) (impl.Message, bool, error) {
	if err := s.lock(ctx); err != nil {
		return impl.Message{}, false, err
	}
	defer s.mu.Unlock()
	e, ok := s.messages[key]
	if !ok { // remove deletes the key: no tombstone is found here
		return impl.Message{}, false, nil
	}
	return e.out(), true, nil
}

// GetMessageShared is GetMessage without copying the payload: the Payload
// is the store's own slice, under the same contract as ListMessagesShared.
// For the simulator's observer, which reads a row back after every queue
// write it observes.
func (s *Store) GetMessageShared(ctx context.Context, key impl.MessageKey) (impl.Message, bool, error) {
	if err := s.lock(ctx); err != nil {
		return impl.Message{}, false, err
	}
	defer s.mu.Unlock()
	e, ok := s.messages[key]
	if !ok {
		return impl.Message{}, false, nil
	}
	return e.msg, true, nil
}

// ListMessages implements impl.Store.
func (s *Store) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	return s.listMessages(ctx, subscriber, true)
}

// ListMessagesShared is ListMessages without copying the payloads: each
// Payload is the store's own slice, which the caller must not modify (the
// store never modifies a stored payload in place either, so it stays what
// it was when listed). For the simulator's observer, which lists the whole
// queue around every retention call and reads no payload.
func (s *Store) ListMessagesShared(ctx context.Context, subscriber string) ([]impl.Message, error) {
	return s.listMessages(ctx, subscriber, false)
}

// Version changes whenever a call may have changed the message queue: every
// call that writes messages moves it, except that DeleteExpired and
// TrimPerSubscriber move it only for what they delete. A caller holding a
// listing taken at a version knows it still holds while Version answers the
// same: the simulator's retention observer then skips listing a queue of a
// thousand rows again around every cleanup that deleted nothing.
func (s *Store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

func (s *Store) listMessages(ctx context.Context, subscriber string, copyPayload bool) ([]impl.Message, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []impl.Message
	list := func(q *queue) {
		for _, e := range q.items {
			if e.gone {
				continue
			}
			if copyPayload {
				out = append(out, e.out())
			} else {
				out = append(out, e.msg)
			}
		}
	}
	if subscriber != "" {
		if q, ok := s.queues[subscriber]; ok {
			out = make([]impl.Message, 0, q.live)
			list(q)
		}
		return out, nil
	}
	out = make([]impl.Message, 0, len(s.messages))
	for _, sub := range s.subs {
		list(s.queues[sub])
	}
	return out, nil
}

// DeleteExpired implements impl.Store. Queues are sorted by CreatedAt, so
// each scan stops at the first message young enough to keep.
func (s *Store) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	c := impl.NanosOf(cutoff)
	return s.deleteUnleased(now, func(_ *queue, e *entry) bool { return e.created >= c }), nil
}

// TrimPerSubscriber implements impl.Store: oldest unleased first, until the
// subscriber is within limit (leased messages count but are never deleted).
func (s *Store) TrimPerSubscriber(ctx context.Context, limit int, now time.Time) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	limit = max(limit, 0)
	return s.deleteUnleased(now, func(q *queue, _ *entry) bool { return q.live <= limit }), nil
}

// deleteUnleased walks each queue in QueueOrder, deleting every message not
// under an active lease at now, until done says the rest of that queue
// stays: the shared walk of DeleteExpired and TrimPerSubscriber.
func (s *Store) deleteUnleased(now time.Time, done func(*queue, *entry) bool) int {
	n := impl.NanosOf(now)
	deleted := 0
	// compact drops emptied subscribers from s.subs, so walk a copy.
	for _, sub := range slices.Clone(s.subs) {
		q := s.queues[sub]
		for _, e := range q.items {
			if done(q, e) {
				break
			}
			if e.gone || e.leaseUntil > n {
				continue
			}
			s.remove(q, e)
			deleted++
		}
		s.compact(sub, q)
	}
	return deleted
}

// GetDelivered implements impl.Store.
func (s *Store) GetDelivered(ctx context.Context, app, source string) ([]impl.DeliveredItem, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	items := s.delivered[appSource{app, source}]
	out := make([]impl.DeliveredItem, 0, len(items))
	for id, v := range items {
		out = append(out, impl.DeliveredItem{ID: id, Version: v})
	}
	slices.SortFunc(out, func(a, b impl.DeliveredItem) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// RecordDelivered implements impl.Store: upserts in order (the last of a
// repeated ID wins), then deletes.
func (s *Store) RecordDelivered(ctx context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	k := appSource{app, source}
	cur := s.delivered[k]
	if cur == nil {
		cur = map[string]string{}
	}
	for _, it := range items {
		cur[it.ID] = it.Version
	}
	for _, id := range deleted {
		delete(cur, id)
	}
	if len(cur) == 0 {
		delete(s.delivered, k)
	} else {
		s.delivered[k] = cur
	}
	return nil
}

// MarkProcessed implements impl.Store.
func (s *Store) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	subscriber, eventID, now, window := req.Subscriber, req.EventID, req.Now, req.Window
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	k := impl.MessageKey{Subscriber: subscriber, EventID: eventID}
	n := impl.NanosOf(now)
	if last, ok := s.processed[k]; ok && last > n-int64(window) {
		return false, nil
	}
	s.processed[k] = n
	return true, nil
}

// Close implements impl.Store. It drops the data; later calls fail with
// ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cursors, s.messages, s.queues, s.subs, s.delivered, s.processed = nil, nil, nil, nil, nil, nil
	return nil
}
