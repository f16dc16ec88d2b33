package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Deliberately broken backends. Each wraps any conforming store and breaks
// one rule of the contract using only the public contract (plus
// impl.BlindCursorWriter), so the same bugs can be planted in memstore,
// pgstore or a third-party backend. They exist to prove that the suite
// catches what it claims to: a suite that passes them is broken.

// The bugs BuggyBackends plants; each is a suffix of the returned Factory's
// Name ("memstore+bug:trim-keeps-oldest").
const (
	BugBlindCursorUpsert   = "blind-cursor-upsert"   // seed 000: the cursor write has no monotonic guard
	BugTrimKeepsOldest     = "trim-keeps-oldest"     // seed 003 backwards: trims the newest
	BugClaimIgnoresLeases  = "claim-ignores-leases"  // hands out messages another node is delivering
	BugEnqueueOverwrites   = "enqueue-overwrites"    // Enqueue not idempotent: a replay resets attempts, leases, dead letters
	BugTTLDeletesLeased    = "ttl-deletes-leased"    // seed 003: purges a message while it is being delivered
	BugDedupWindowSlides   = "dedup-window-slides"   // a duplicate refreshes the dedup entry
	BugRequeueDropsPayload = "requeue-drops-payload" // a requeued dead letter comes back with no payload
)

// BuggyBackends returns one Factory per planted bug, each wrapping a fresh
// store from base.New. The blind-cursor bug needs impl.BlindCursorWriter
// and is included only when base declares Features.BlindCursor. The
// wrappers keep base's Concurrent and AmbiguousErrors features.
func BuggyBackends(base Factory) []Factory {
	bugs := []struct {
		name string
		wrap func(impl.Store) impl.Store
	}{
		{BugTrimKeepsOldest, func(s impl.Store) impl.Store { return trimKeepsOldest{s} }},
		{BugClaimIgnoresLeases, func(s impl.Store) impl.Store { return claimIgnoresLeases{s} }},
		{BugEnqueueOverwrites, func(s impl.Store) impl.Store { return enqueueOverwrites{s} }},
		{BugTTLDeletesLeased, func(s impl.Store) impl.Store { return ttlDeletesLeased{s} }},
		{BugDedupWindowSlides, func(s impl.Store) impl.Store { return dedupWindowSlides{s} }},
		{BugRequeueDropsPayload, func(s impl.Store) impl.Store {
			return &requeueDropsPayload{Store: s, dropped: map[impl.MessageKey]bool{}}
		}},
	}
	if base.Features.BlindCursor {
		bugs = append([]struct {
			name string
			wrap func(impl.Store) impl.Store
		}{{BugBlindCursorUpsert, func(s impl.Store) impl.Store { return blindCursorUpsert{s} }}}, bugs...)
	}
	out := make([]Factory, 0, len(bugs))
	for _, b := range bugs {
		feats := base.Features
		feats.BlindCursor = false
		feats.LeasedEnqueue = false // the bug wrappers embed impl.Store: no capability survives them
		feats.HandOff = false
		out = append(out, Factory{
			Name:     base.Name + "+bug:" + b.name,
			Features: feats,
			New: func(t testing.TB) impl.Store {
				return b.wrap(base.New(t))
			},
		})
	}
	return out
}

type blindCursorUpsert struct{ impl.Store }

func (s blindCursorUpsert) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	w, ok := s.Store.(impl.BlindCursorWriter)
	if !ok {
		return nil, fmt.Errorf("conformance: %s needs a store implementing impl.BlindCursorWriter", BugBlindCursorUpsert)
	}
	written := make([]bool, len(cs))
	for i, c := range cs {
		if err := w.PutCursorBlind(ctx, c); err != nil {
			return nil, err
		}
		written[i] = true
	}
	return written, nil
}

// bySubscriber groups messages (already in QueueOrder) per subscriber.
func bySubscriber(ms []impl.Message) [][]impl.Message {
	var out [][]impl.Message
	for i, m := range ms {
		if i == 0 || m.Subscriber != ms[i-1].Subscriber {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], m)
	}
	return out
}

func leasedAt(m impl.Message, now time.Time) bool {
	return impl.NanosOf(m.LeaseUntil) > impl.NanosOf(now)
}

type trimKeepsOldest struct{ impl.Store }

func (s trimKeepsOldest) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	all, err := s.ListMessages(ctx, "")
	if err != nil {
		return 0, err
	}
	var doomed []impl.MessageKey
	for _, q := range bySubscriber(all) {
		excess := len(q) - max
		for i := len(q) - 1; i >= 0 && excess > 0; i-- {
			if !leasedAt(q[i], now) {
				doomed = append(doomed, q[i].Key())
				excess--
			}
		}
	}
	return s.Ack(ctx, doomed)
}

type claimIgnoresLeases struct{ impl.Store }

func (s claimIgnoresLeases) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	before, err := s.ListMessages(ctx, req.Subscriber)
	if err != nil {
		return nil, err
	}
	claimed, err := s.Store.Claim(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, m := range before {
		if !m.Dead && impl.NanosOf(m.NextAttemptAt) <= impl.NanosOf(req.Now) && leasedAt(m, req.Now) {
			m.LeaseOwner, m.LeaseUntil = req.Owner, impl.TimeOf(impl.NanosOf(req.Now)+int64(req.Lease))
			claimed = append(claimed, m)
		}
	}
	slices.SortStableFunc(claimed, impl.QueueCompare)
	if len(claimed) > req.Limit {
		claimed = claimed[:max(req.Limit, 0)]
	}
	return claimed, nil
}

type enqueueOverwrites struct{ impl.Store }

func (s enqueueOverwrites) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	n := 0
	for _, m := range msgs {
		if _, err := s.Ack(ctx, []impl.MessageKey{m.Key()}); err != nil {
			return n, err
		}
		if _, err := s.Store.Enqueue(ctx, []impl.Message{m}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

type ttlDeletesLeased struct{ impl.Store }

func (s ttlDeletesLeased) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	all, err := s.ListMessages(ctx, "")
	if err != nil {
		return 0, err
	}
	var doomed []impl.MessageKey
	for _, m := range all {
		if impl.NanosOf(m.CreatedAt) < impl.NanosOf(cutoff) {
			doomed = append(doomed, m.Key())
		}
	}
	return s.Ack(ctx, doomed)
}

type dedupWindowSlides struct{ impl.Store }

func (s dedupWindowSlides) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	fresh, err := s.Store.MarkProcessed(ctx, req)
	if err != nil || fresh {
		return fresh, err
	}
	// A zero window makes any entry expired: this re-records the
	// duplicate's time, sliding the window forward.
	req.Window = 0
	_, err = s.Store.MarkProcessed(ctx, req)
	return false, err
}

// requeueDropsPayload loses a dead letter's payload when it is requeued, as
// a backend that rebuilds the revived row from a partial copy would. Only
// the contract is used: every read returns a requeued message without its
// payload until the message leaves the queue.
type requeueDropsPayload struct {
	impl.Store
	mu      sync.Mutex
	dropped map[impl.MessageKey]bool
}

func (s *requeueDropsPayload) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	ok, err := s.Store.Requeue(ctx, key, now)
	if ok && err == nil {
		s.mu.Lock()
		s.dropped[key] = true
		s.mu.Unlock()
	}
	return ok, err
}

func (s *requeueDropsPayload) strip(ms []impl.Message) []impl.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range ms {
		if s.dropped[ms[i].Key()] {
			ms[i].Payload = nil
		}
	}
	return ms
}

func (s *requeueDropsPayload) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	ms, err := s.Store.ListMessages(ctx, subscriber)
	return s.strip(ms), err
}

func (s *requeueDropsPayload) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	ms, err := s.Store.Claim(ctx, req)
	return s.strip(ms), err
}

func (s *requeueDropsPayload) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	m, ok, err := s.Store.Fail(ctx, req)
	return s.strip([]impl.Message{m})[0], ok, err
}

// forget drops the marks of messages that left the queue, so a new message
// under the same key keeps its payload.
func (s *requeueDropsPayload) forget(ctx context.Context) {
	all, err := s.Store.ListMessages(ctx, "")
	if err != nil {
		return
	}
	present := map[impl.MessageKey]bool{}
	for _, m := range all {
		present[m.Key()] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.dropped {
		if !present[k] {
			delete(s.dropped, k)
		}
	}
}

func (s *requeueDropsPayload) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	s.forget(ctx)
	return s.Store.Enqueue(ctx, msgs)
}

func (s *requeueDropsPayload) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	n, err := s.Store.Ack(ctx, keys)
	s.forget(ctx)
	return n, err
}

func (s *requeueDropsPayload) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	n, err := s.Store.DeleteExpired(ctx, cutoff, now)
	s.forget(ctx)
	return n, err
}

func (s *requeueDropsPayload) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	n, err := s.Store.TrimPerSubscriber(ctx, max, now)
	s.forget(ctx)
	return n, err
}

// BugCursorReadThenWrite is a race, not a sequential bug: AdvanceCursors
// reads the stored cursor, compares, and writes with a second call, so
// on memstore it locks, reads, unlocks, locks again and writes without
// re-checking. Alone it is correct; two advances of one key that meet in
// the gap both write, and the lower position can land last: a cursor
// regresses. Only the Linearizability group can see it.
const BugCursorReadThenWrite = "cursor-read-then-write"

// BugHandOffNotAtomic is a race too: WriteHandOff runs Ack, EnqueueLeased
// and AdvanceCursors as three calls of their own, which give the same
// results one by one. A call that lands between two of them sees the acks
// without the messages, or the messages without the cursor, which no
// order of atomic hand-offs explains.
const BugHandOffNotAtomic = "hand-off-not-atomic"

// RacyBackends returns one Factory per planted race that base has the
// capabilities for (the cursor race needs Features.BlindCursor, the write
// it uses; the hand-off race Features.HandOff and Features.LeasedEnqueue).
// Each is correct call by call and wrong only under concurrency, so the
// sequential groups pass it and the Linearizability group must not.
func RacyBackends(base Factory) []Factory {
	feats := base.Features
	feats.BlindCursor, feats.LeasedEnqueue, feats.HandOff = false, false, false
	var out []Factory
	if base.Features.BlindCursor {
		out = append(out, Factory{
			Name:     base.Name + "+race:" + BugCursorReadThenWrite,
			Features: feats,
			New: func(t testing.TB) impl.Store {
				return cursorReadThenWrite{base.New(t)}
			},
		})
	}
	if base.Features.HandOff && base.Features.LeasedEnqueue {
		hf := feats
		hf.HandOff, hf.LeasedEnqueue = true, true
		out = append(out, Factory{
			Name:     base.Name + "+race:" + BugHandOffNotAtomic,
			Features: hf,
			New: func(t testing.TB) impl.Store {
				return handOffInThreeCalls{base.New(t)}
			},
		})
	}
	return out
}

type handOffInThreeCalls struct{ impl.Store }

func (s handOffInThreeCalls) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	l, ok := impl.AsLeasingEnqueuer(s.Store)
	if !ok {
		return nil, fmt.Errorf("conformance: %s needs a store implementing impl.LeasingEnqueuer", BugHandOffNotAtomic)
	}
	return l.EnqueueLeased(ctx, msgs)
}

func (s handOffInThreeCalls) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	var l impl.LeasingEnqueuer = s
	var r impl.HandOffResult
	var err error
	if r.Acked, err = s.Ack(ctx, w.Ack); err != nil {
		return impl.HandOffResult{}, err
	}
	if len(w.Enqueue) > 0 {
		if r.Inserted, err = l.EnqueueLeased(ctx, w.Enqueue); err != nil {
			return impl.HandOffResult{}, err
		}
	}
	if len(w.Cursors) > 0 {
		if r.Written, err = s.AdvanceCursors(ctx, w.Cursors); err != nil {
			return impl.HandOffResult{}, err
		}
	}
	return r, nil
}

type cursorReadThenWrite struct{ impl.Store }

func (s cursorReadThenWrite) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	w, ok := s.Store.(impl.BlindCursorWriter)
	if !ok {
		return nil, fmt.Errorf("conformance: %s needs a store implementing impl.BlindCursorWriter", BugCursorReadThenWrite)
	}
	written := make([]bool, len(cs))
	for i, c := range cs {
		old, found, err := s.GetCursor(ctx, c.Key)
		if err != nil {
			return nil, err
		}
		if found && c.Pos.Compare(old.Pos) <= 0 {
			continue
		}
		if err := w.PutCursorBlind(ctx, c); err != nil {
			return nil, err
		}
		written[i] = true
	}
	return written, nil
}

// Bugs in the blind spots the suite had before it listed hundreds of
// messages and counted a requeued key's rows: each passed the whole suite
// then. Unlike BuggyBackends' bugs, the state machine cannot see the first
// (its tiny key space never fills a page); a Contract check catches each.
const (
	// BugKeysetNoTieBreak: ListMessages reads pages of bugPageSize rows
	// and starts each page after the last row's (Subscriber, CreatedAt),
	// with no EventID tie-break, so the rows that share a CreatedAt with
	// a page's last row are skipped.
	BugKeysetNoTieBreak = "keyset-no-tie-break"
	// BugRequeueLeavesRow: Requeue inserts the revived message as a new
	// row and leaves the dead one, so the key is listed twice.
	BugRequeueLeavesRow = "requeue-leaves-row"
)

// bugPageSize is the page of the keyset bug: a common default.
const bugPageSize = 100

// BlindSpotBackends returns one Factory per bug of the blind spots, each
// wrapping a fresh store from base.New; they keep base's Concurrent and
// AmbiguousErrors features.
func BlindSpotBackends(base Factory) []Factory {
	feats := base.Features
	feats.BlindCursor, feats.LeasedEnqueue, feats.HandOff = false, false, false
	var out []Factory
	for _, b := range []struct {
		name string
		wrap func(impl.Store) impl.Store
	}{
		{BugKeysetNoTieBreak, func(s impl.Store) impl.Store { return keysetNoTieBreak{s} }},
		{BugRequeueLeavesRow, func(s impl.Store) impl.Store {
			return &requeueLeavesRow{Store: s, dead: map[impl.MessageKey]impl.Message{}}
		}},
	} {
		out = append(out, Factory{
			Name:     base.Name + "+bug:" + b.name,
			Features: feats,
			New:      func(t testing.TB) impl.Store { return b.wrap(base.New(t)) },
		})
	}
	return out
}

type keysetNoTieBreak struct{ impl.Store }

// ListMessages pages as `WHERE (subscriber, created_at) > ($1, $2) ORDER
// BY subscriber, created_at, event_id LIMIT 100` would, from the store's
// full, correct listing.
func (s keysetNoTieBreak) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	all, err := s.Store.ListMessages(ctx, subscriber)
	if err != nil {
		return nil, err
	}
	var out []impl.Message
	for i := 0; i < len(all); {
		page := all[i:min(i+bugPageSize, len(all))]
		out = append(out, page...)
		last := page[len(page)-1]
		i += len(page)
		for i < len(all) && all[i].Subscriber == last.Subscriber && impl.NanosOf(all[i].CreatedAt) == impl.NanosOf(last.CreatedAt) {
			i++
		}
	}
	return out, nil
}

// requeueLeavesRow keeps, for each requeued key still in the queue, the
// dead row Requeue should have revived, and lists it beside the live one
// until the key leaves the queue (a delete by key takes both rows).
type requeueLeavesRow struct {
	impl.Store
	mu   sync.Mutex
	dead map[impl.MessageKey]impl.Message
}

func (s *requeueLeavesRow) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	before, err := s.Store.ListMessages(ctx, key.Subscriber)
	if err != nil {
		return false, err
	}
	ok, err := s.Store.Requeue(ctx, key, now)
	if ok && err == nil {
		for _, m := range before {
			if m.Key() == key {
				s.mu.Lock()
				s.dead[key] = m
				s.mu.Unlock()
			}
		}
	}
	return ok, err
}

func (s *requeueLeavesRow) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	ms, err := s.Store.ListMessages(ctx, subscriber)
	if err != nil {
		return nil, err
	}
	present := map[impl.MessageKey]bool{}
	for _, m := range ms {
		present[m.Key()] = true
	}
	s.mu.Lock()
	for k, m := range s.dead {
		if present[k] && (subscriber == "" || subscriber == k.Subscriber) {
			ms = append(ms, m)
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(ms, impl.QueueCompare)
	return ms, nil
}

// forget drops the dead rows of keys that left the queue.
func (s *requeueLeavesRow) forget(ctx context.Context) {
	all, err := s.Store.ListMessages(ctx, "")
	if err != nil {
		return
	}
	present := map[impl.MessageKey]bool{}
	for _, m := range all {
		present[m.Key()] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.dead {
		if !present[k] {
			delete(s.dead, k)
		}
	}
}

func (s *requeueLeavesRow) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	n, err := s.Store.Ack(ctx, keys)
	s.forget(ctx)
	return n, err
}

func (s *requeueLeavesRow) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	n, err := s.Store.DeleteExpired(ctx, cutoff, now)
	s.forget(ctx)
	return n, err
}

func (s *requeueLeavesRow) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	n, err := s.Store.TrimPerSubscriber(ctx, max, now)
	s.forget(ctx)
	return n, err
}
