package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// observedStore sits between a node's fault wrapper and the real store, so
// it sees exactly the calls that reached the store and their true results.
// It turns committed writes into observations for the checker: hand-offs,
// dead letters, durable cursors read back after every cursor write, and the
// exact set each retention call deleted.
type observedStore struct {
	s     *sim
	n     *node
	inner impl.Store
}

var (
	_ impl.Store             = (*observedStore)(nil)
	_ impl.BlindCursorWriter = (*observedStore)(nil)
	_ impl.LeasingEnqueuer   = (*observedStore)(nil)
	_ impl.HandOffWriter     = (*observedStore)(nil)
	_ impl.Wrapper           = (*observedStore)(nil)
)

// Unwrap returns the real store (impl.Wrapper).
func (o *observedStore) Unwrap() impl.Store { return o.inner }

// queueWrite runs a call that may change the queue. It is the one place
// that drops the retention snapshot of a backend without a version (the
// queue listing currentQueue keeps), so every queue-changing method goes
// through it, and it records a real store error. It reports whether the
// call succeeded.
func (o *observedStore) queueWrite(method string, call func() error) bool {
	if _, ok := o.inner.(versioned); !ok {
		o.s.queueListed = false
	}
	if err := call(); err != nil {
		o.realErr(method, err)
		o.n.told.StoreErrors++ // the caller gets it
		return false
	}
	return true
}

// realErr records an error from the real store itself (never from memstore;
// a Postgres hiccup). The outcome is unknown, so nothing is observed as
// committed.
func (o *observedStore) realErr(method string, err error) {
	o.s.rec(o.n.name, "store-real-error", "method", method, "err", err.Error())
}

func (o *observedStore) GetCursor(ctx context.Context, key impl.CursorKey) (impl.Cursor, bool, error) {
	c, ok, err := o.inner.GetCursor(ctx, key)
	o.passErr(err)
	return c, ok, err
}

func (o *observedStore) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	cs, err := o.inner.ListCursors(ctx)
	o.passErr(err)
	if err == nil {
		// No fault wrapper alters a read after it reached the store, so
		// this is exactly what the engine is told (resume-from-cursor).
		o.s.observe(oracle.Observation{Kind: oracle.ObsCursorsRead, Node: o.n.name, Cursors: cs})
	}
	return cs, err
}

// passErr counts an error of the real store handed to the caller as it is
// (reported-counters: the engine's store_errors).
func (o *observedStore) passErr(err error) {
	if err != nil {
		o.n.told.StoreErrors++
	}
}

// readBack observes the durable cursor of each key after a write.
func (o *observedStore) readBack(ctx context.Context, keys []impl.CursorKey) {
	seen := map[impl.CursorKey]bool{}
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		c, ok, err := o.inner.GetCursor(ctx, k)
		if err != nil {
			o.realErr("GetCursor", err)
			continue
		}
		if !ok {
			continue
		}
		st := o.s.byStream[k.Stream]
		if !o.s.skipRec() {
			o.s.rec(o.n.name, "cursor", "stream", k.Stream, "subscriber", k.Subscriber, "pos", posString(c.Pos))
		}
		o.s.observe(oracle.Observation{
			Kind: oracle.ObsCursor, Node: o.n.name, Cursor: c, Stream: k.Stream,
			LogStream: st != nil && st.spec.Kind == engine.LogStream,
		})
	}
}

func (o *observedStore) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	if !o.n.asyncWrite {
		o.s.askCursors(o.n, cs)
	}
	// How many stream cursors one write names (boundaries.go; a join's
	// markers are not stream cursors): a batching store or engine meets
	// its batch cap only in a wide world.
	streams := 0
	for i := range cs {
		if cs[i].Key.Subscriber == "" {
			streams++
		}
	}
	if streams >= WideStreams {
		o.s.cov.hit(CovCursorsWide)
	}
	if streams >= 5 {
		o.s.cov.hit(CovCursorsFive)
	}
	ok, err := o.inner.AdvanceCursors(ctx, cs)
	if err != nil {
		o.realErr("AdvanceCursors", err)
		o.passErr(err)
		return ok, err
	}
	keys := make([]impl.CursorKey, len(cs))
	for i, c := range cs {
		keys[i] = c.Key
	}
	o.readBack(ctx, keys)
	o.n.pendTold = append(o.n.pendTold, cs...)
	if !o.n.asyncWrite {
		o.n.pend.CursorWrites += countTrue(ok) // an async write counts once it is done
	}
	return ok, nil
}

func (o *observedStore) PutCursorBlind(ctx context.Context, c impl.Cursor) error {
	bw, ok := impl.AsBlindCursorWriter(o.inner)
	if !ok {
		return fmt.Errorf("sim: store %T does not implement impl.BlindCursorWriter", o.inner)
	}
	if err := bw.PutCursorBlind(ctx, c); err != nil {
		o.realErr("PutCursorBlind", err)
		o.passErr(err)
		return err
	}
	o.readBack(ctx, []impl.CursorKey{c.Key})
	return nil
}

func (o *observedStore) Enqueue(ctx context.Context, msgs []impl.Message) (n int, err error) {
	if o.queueWrite("Enqueue", func() error { n, err = o.inner.Enqueue(ctx, msgs); return err }) {
		o.enqueued(msgs, nil)
		o.n.pend.Enqueued += n
	}
	return n, err
}

// leasedInserts books the rows a leased enqueue inserted leased to the
// node: sends of those are sends from a row (reported-counters).
func (o *observedStore) leasedInserts(msgs []impl.Message, ins []bool) {
	for i := range msgs {
		if i < len(ins) && ins[i] && msgs[i].LeaseOwner != "" {
			o.n.pendLeased = append(o.n.pendLeased, msgs[i].Key())
		}
	}
}

// enqueued observes a committed enqueue: a row exists for every message
// afterwards (inserted now, or already there).
//
// A row inserted leased to the node (ins[i], for a leased enqueue) keeps
// its LeaseUntil and CreatedAt: the lease the store granted then
// (model/oracle/check_lease.go); a leased row that was not inserted grants
// nothing, and shows none.
func (o *observedStore) enqueued(msgs []impl.Message, ins []bool) {
	o.s.activity++
	o.s.cov.bnd.enqueuedRows(len(msgs))
	keys := make([]impl.Message, len(msgs))
	for i, m := range msgs {
		keys[i] = impl.Message{Subscriber: m.Subscriber, EventID: m.EventID, LeaseOwner: m.LeaseOwner}
		if i < len(ins) && ins[i] && m.LeaseOwner != "" {
			keys[i].LeaseUntil, keys[i].CreatedAt = m.LeaseUntil, m.CreatedAt
		}
	}
	o.s.observe(oracle.Observation{Kind: oracle.ObsEnqueued, Node: o.n.name, Messages: keys})
}

// EnqueueLeased is observed like Enqueue.
func (o *observedStore) EnqueueLeased(ctx context.Context, msgs []impl.Message) (ins []bool, err error) {
	le, ok := impl.AsLeasingEnqueuer(o.inner)
	if !ok {
		return nil, fmt.Errorf("EnqueueLeased: the %T backend has no leased enqueue", o.inner)
	}
	if o.queueWrite("EnqueueLeased", func() error { ins, err = le.EnqueueLeased(ctx, msgs); return err }) {
		o.enqueued(msgs, ins)
		o.n.pend.Enqueued += countTrue(ins)
		o.leasedInserts(msgs, ins)
	}
	return ins, err
}

// WriteHandOff is observed as its parts, in the order they take effect:
// the acks, the enqueue, the cursor writes read back.
func (o *observedStore) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (res impl.HandOffResult, err error) {
	hw, ok := impl.AsHandOffWriter(o.inner)
	if !ok {
		return res, fmt.Errorf("WriteHandOff: the %T backend has no hand-off write", o.inner)
	}
	o.s.askCursors(o.n, w.Cursors)
	if !o.queueWrite("WriteHandOff", func() error { res, err = hw.WriteHandOff(ctx, w); return err }) {
		return res, err
	}
	o.n.pendTold = append(o.n.pendTold, w.Cursors...)
	o.n.pend.CursorWrites += countTrue(res.Written)
	o.n.pend.Enqueued += countTrue(res.Inserted)
	o.leasedInserts(w.Enqueue, res.Inserted)
	o.n.pend.Acked += len(w.Ack)
	o.n.pendUnleased = append(o.n.pendUnleased, w.Ack...)
	if len(w.Ack) > 0 {
		o.s.activity++
		o.s.observe(oracle.Observation{Kind: oracle.ObsAcked, Node: o.n.name, Keys: append([]impl.MessageKey(nil), w.Ack...)})
	}
	if len(w.Enqueue) > 0 {
		o.enqueued(w.Enqueue, res.Inserted)
	}
	if len(w.Cursors) > 0 {
		keys := make([]impl.CursorKey, len(w.Cursors))
		for i, c := range w.Cursors {
			keys[i] = c.Key
		}
		o.readBack(ctx, keys)
	}
	return res, nil
}

func (o *observedStore) Claim(ctx context.Context, req impl.ClaimRequest) (msgs []impl.Message, err error) {
	ok := o.queueWrite("Claim", func() error { msgs, err = o.inner.Claim(ctx, req); return err })
	if ok {
		o.s.cov.bnd.claimPage(ctx, o.inner, req, len(msgs))
	}
	if ok && len(msgs) > 0 {
		o.s.activity++
		o.s.cov.claimed(msgs)
		o.s.observe(oracle.Observation{Kind: oracle.ObsClaimed, Node: o.n.name, Messages: msgs, Clock: req.Now})
		for _, m := range msgs {
			o.n.pendLeased = append(o.n.pendLeased, m.Key())
		}
	}
	return msgs, err
}

func (o *observedStore) Ack(ctx context.Context, keys []impl.MessageKey) (n int, err error) {
	if !o.queueWrite("Ack", func() error { n, err = o.inner.Ack(ctx, keys); return err }) {
		return n, err
	}
	o.s.activity++
	o.n.pend.Acked += len(keys)
	o.n.pendUnleased = append(o.n.pendUnleased, keys...)
	o.s.observe(oracle.Observation{Kind: oracle.ObsAcked, Node: o.n.name, Keys: append([]impl.MessageKey(nil), keys...)})
	return n, nil
}

func (o *observedStore) Fail(ctx context.Context, req impl.FailRequest) (m impl.Message, ok bool, err error) {
	if !o.queueWrite("Fail", func() error { m, ok, err = o.inner.Fail(ctx, req); return err }) {
		return m, ok, err
	}
	key := req.Key
	o.s.activity++
	if ok {
		o.n.pendUnleased = append(o.n.pendUnleased, key)
	}
	if ok && m.Dead {
		o.n.pend.DeadLettered++
	}
	if ok {
		// What the checker judges is the committed row, read back, not
		// the answer handed to the engine.
		row, found := o.row(ctx, key)
		switch {
		case !found:
		case row.Dead:
			o.s.rec(o.n.name, "dead-letter", "bot", key.Subscriber, "event", key.EventID, "attempts", row.Attempts)
			o.s.observe(oracle.Observation{Kind: oracle.ObsDead, Node: o.n.name, Bot: key.Subscriber, EventID: key.EventID, Messages: []impl.Message{row}})
		default:
			o.s.observe(oracle.Observation{Kind: oracle.ObsFailed, Node: o.n.name, Bot: key.Subscriber, EventID: key.EventID, Messages: []impl.Message{row}})
		}
	}
	return m, ok, nil
}

// row reads the committed row of key back from the store.
// messageGetter is a backend's optional point read of one message
// (memstore has it): row would otherwise list and copy the subscriber's
// whole queue after every write it observes, the sweep's largest single
// cost in a profile of seeds 1-20.
// The read shares the stored payload instead of copying it (memstore never
// modifies a stored payload in place), as the retention snapshots do.
type messageGetter interface {
	GetMessageShared(ctx context.Context, key impl.MessageKey) (impl.Message, bool, error)
}

func (o *observedStore) row(ctx context.Context, key impl.MessageKey) (impl.Message, bool) {
	if g, ok := o.inner.(messageGetter); ok {
		m, found, err := g.GetMessageShared(ctx, key)
		if err != nil {
			o.realErr("GetMessage", err)
			return impl.Message{}, false
		}
		return m, found
	}
	msgs, err := o.inner.ListMessages(ctx, key.Subscriber)
	if err != nil {
		o.realErr("ListMessages", err)
		return impl.Message{}, false
	}
	for _, m := range msgs {
		if m.EventID == key.EventID {
			return m, true
		}
	}
	return impl.Message{}, false
}

func (o *observedStore) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (ok bool, err error) {
	if !o.queueWrite("Requeue", func() error { ok, err = o.inner.Requeue(ctx, key, now); return err }) {
		return ok, err
	}
	if ok {
		o.n.pend.Requeued++
		o.s.activity++
		o.s.observe(oracle.Observation{Kind: oracle.ObsRequeued, Node: o.n.name, Bot: key.Subscriber, EventID: key.EventID})
	}
	return ok, nil
}

func (o *observedStore) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	ms, err := o.inner.ListMessages(ctx, subscriber)
	o.passErr(err)
	if err == nil && subscriber == "" {
		o.s.cov.bnd.listed(ms)
		var keyless []string
		for _, b := range o.s.bots {
			if !b.hasKey {
				keyless = append(keyless, b.spec.ID)
			}
		}
		o.s.observe(oracle.Observation{Kind: oracle.ObsQueueRead, Node: o.n.name, Messages: slices.Clone(ms),
			Clock: nodeClock{o.n}.Now(), Keyless: keyless})
	}
	return ms, err
}

// retention runs one retention call between two listings of the queue and
// observes exactly what it deleted and what it left. Either listing is the
// snapshot kept from an earlier one while that is still current
// (currentQueue): the engine runs its TTL and cap rules back to back, and
// most cleanups delete nothing.
func (o *observedStore) retention(ctx context.Context, rule string, cutoff time.Time, max int, call func() (int, error)) (int, error) {
	before, err := o.currentQueue(ctx)
	if err != nil {
		o.realErr("ListMessages", err)
		n, err := call()
		o.passErr(err)
		o.retained(rule, n, err)
		return n, err
	}
	var n int
	if !o.queueWrite("retention/"+rule, func() error { n, err = call(); return err }) {
		return n, err
	}
	o.retained(rule, n, nil)
	after, err := o.currentQueue(ctx)
	if err != nil {
		o.realErr("ListMessages", err)
		return n, nil
	}
	var deleted []impl.Message
	// Most calls delete nothing and list the same keys in the same order
	// before and after; then nothing of before is missing from after
	// without building the set of after's keys.
	if !sameKeys(before, after) {
		kept := make(map[impl.MessageKey]bool, len(after))
		for _, m := range after {
			kept[m.Key()] = true
		}
		for _, m := range before {
			if !kept[m.Key()] {
				deleted = append(deleted, m)
			}
		}
	}
	if len(deleted) > 0 {
		o.s.activity++
	}
	clock := nodeClock{o.n}.Now()
	o.s.rec(o.n.name, "retention", "rule", rule, "deleted", len(deleted), "remaining", len(after))
	o.s.observe(oracle.Observation{
		Kind: oracle.ObsCleanup, Node: o.n.name, Rule: rule, Clock: clock, Cutoff: cutoff, Max: max,
		Deleted: deleted, Remaining: after,
	})
	return n, nil
}

// sameKeys reports whether a and b list the same message keys in the same
// order.
func sameKeys(a, b []impl.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Subscriber != b[i].Subscriber || a[i].EventID != b[i].EventID {
			return false
		}
	}
	return true
}

// sharedLister is a backend's optional listing of the whole queue without
// copying payloads (memstore has it): the retention observer lists the
// queue around every retention call and reads no payload, and the copies
// were a fifth of a sweep's allocations.
type sharedLister interface {
	ListMessagesShared(ctx context.Context, subscriber string) ([]impl.Message, error)
}

// versioned is a backend's optional queue version (memstore has it): it
// moves whenever a call may have changed the message queue, so a listing
// taken at one version still holds while it answers the same.
type versioned interface {
	Version() uint64
}

// currentQueue lists the whole queue, or hands back the listing kept from
// the last one while it is current: for a versioned backend while the
// version has not moved; for any other, until a call that may change a
// message goes through queueWrite. A cleanup every lease over a thousand
// held rows listed them twice a cleanup, a quarter of a sweep's
// allocations.
func (o *observedStore) currentQueue(ctx context.Context) ([]impl.Message, error) {
	v, isVersioned := o.inner.(versioned)
	var ver uint64
	if isVersioned {
		ver = v.Version()
	}
	if o.s.queueListed && (!isVersioned || ver == o.s.queueVersion) {
		return o.s.queue, nil
	}
	q, err := o.listShared(ctx)
	if err != nil {
		return nil, err
	}
	o.s.queue, o.s.queueListed, o.s.queueVersion = q, true, ver
	return q, nil
}

func (o *observedStore) listShared(ctx context.Context) ([]impl.Message, error) {
	return listShared(ctx, o.inner)
}

// listShared lists the whole queue of st for a reader that reads no
// payload, without copying payloads when the backend allows it.
func listShared(ctx context.Context, st impl.Store) ([]impl.Message, error) {
	if l, ok := st.(sharedLister); ok {
		return l.ListMessagesShared(ctx, "")
	}
	return st.ListMessages(ctx, "")
}

// retained books what a retention call answered it deleted (the
// engine's retention counters), unless it failed.
func (o *observedStore) retained(rule string, n int, err error) {
	switch {
	case err != nil:
	case rule == "ttl":
		o.n.pend.RetentionTTL += n
	default:
		o.n.pend.RetentionCap += n
	}
}

func (o *observedStore) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	return o.retention(ctx, "ttl", cutoff, 0, func() (int, error) { return o.inner.DeleteExpired(ctx, cutoff, now) })
}

func (o *observedStore) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	return o.retention(ctx, "cap", time.Time{}, max, func() (int, error) { return o.inner.TrimPerSubscriber(ctx, max, now) })
}

func (o *observedStore) GetDelivered(ctx context.Context, app, source string) ([]impl.DeliveredItem, error) {
	items, err := o.inner.GetDelivered(ctx, app, source)
	o.passErr(err)
	return items, err
}

func (o *observedStore) RecordDelivered(ctx context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	err := o.inner.RecordDelivered(ctx, app, source, items, deleted)
	o.passErr(err)
	return err
}

func (o *observedStore) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	ok, err := o.inner.MarkProcessed(ctx, req)
	o.passErr(err)
	return ok, err
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// Close is a no-op: the simulator owns the shared store and closes it once.
func (o *observedStore) Close() error { return nil }
