package model

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Store is the sequential specification of impl.Store.
//
// It has value semantics: every method leaves its receiver unchanged and
// returns the new state, so a caller may keep any number of old states alive
// (the rapid oracle keeps a set of candidate states under ambiguous errors,
// porcupine explores many linearizations from one state). The zero value is
// the empty store. Each method copies the maps it changes: slow, and
// obviously correct, which is what a spec is for.
//
// Every instant is normalised with impl.TimeOf(impl.NanosOf(t)) when it
// enters the model, and every empty byte slice becomes nil, so results
// compare with == / reflect.DeepEqual against any conforming backend.
type Store struct {
	cursors   map[impl.CursorKey]impl.Cursor
	messages  map[impl.MessageKey]impl.Message
	delivered map[AppSource]map[string]string
	processed map[impl.MessageKey]int64 // (subscriber, event id) -> Unix nanos last recorded
}

// AppSource keys snapshot-style delivered state (seed 002).
type AppSource struct {
	App    string
	Source string
}

// NormTime is the instant as every backend reads it back: nanosecond
// precision, UTC, no monotonic reading, zero stays zero.
func NormTime(t time.Time) time.Time { return impl.TimeOf(impl.NanosOf(t)) }

// NormBytes copies b; empty becomes nil, because backends differ on whether
// an empty BYTEA comes back as nil and the contract does not care.
func NormBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// NormCursor returns a deep, normalised copy of c.
func NormCursor(c impl.Cursor) impl.Cursor {
	c.Token = NormBytes(c.Token)
	c.UpdatedAt = NormTime(c.UpdatedAt)
	return c
}

// NormMessage returns a deep, normalised copy of m.
func NormMessage(m impl.Message) impl.Message {
	m.Payload = NormBytes(m.Payload)
	m.CreatedAt = NormTime(m.CreatedAt)
	m.NextAttemptAt = NormTime(m.NextAttemptAt)
	m.LeaseUntil = NormTime(m.LeaseUntil)
	return m
}

// leaseActive is the one definition of "under an active lease" the contract
// uses in Claim, DeleteExpired and TrimPerSubscriber.
func leaseActive(m impl.Message, now int64) bool {
	return impl.NanosOf(m.LeaseUntil) > now
}

// Claimable is the one definition of a due row: a Claim at now may lease
// m (not dead, its next attempt come, no active lease).
func Claimable(m impl.Message, now time.Time) bool {
	n := impl.NanosOf(now)
	return !m.Dead && impl.NanosOf(m.NextAttemptAt) <= n && !leaseActive(m, n)
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return maps.Clone(m)
}

// GetCursor returns the cursor stored under key.
func (s Store) GetCursor(key impl.CursorKey) (impl.Cursor, bool) {
	c, ok := s.cursors[key]
	if !ok {
		return impl.Cursor{}, false
	}
	return NormCursor(c), true
}

// ListCursors returns every cursor sorted by key.
func (s Store) ListCursors() []impl.Cursor {
	keys := slices.SortedFunc(maps.Keys(s.cursors), compareCursorKeys)
	out := make([]impl.Cursor, 0, len(keys))
	for _, k := range keys {
		out = append(out, NormCursor(s.cursors[k]))
	}
	return out
}

func compareCursorKeys(a, b impl.CursorKey) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// AdvanceCursors applies the conditional upsert to each cursor in order.
func (s Store) AdvanceCursors(cs []impl.Cursor) (Store, []bool) {
	written := make([]bool, len(cs))
	if len(cs) == 0 {
		return s, written
	}
	m := cloneMap(s.cursors)
	for i, c := range cs {
		old, ok := m[c.Key]
		if !ok || c.Pos.Compare(old.Pos) > 0 {
			m[c.Key] = NormCursor(c)
			written[i] = true
		}
	}
	s.cursors = m
	return s, written
}

// PutCursorBlind is impl.BlindCursorWriter: an unconditional upsert.
func (s Store) PutCursorBlind(c impl.Cursor) Store {
	m := cloneMap(s.cursors)
	m[c.Key] = NormCursor(c)
	s.cursors = m
	return s
}

// Enqueue inserts each message whose key is absent, in input order (so the
// first of two inputs with one key wins), and returns how many it inserted.
func (s Store) Enqueue(msgs []impl.Message) (Store, int) {
	m := cloneMap(s.messages)
	n := 0
	for _, in := range msgs {
		k := in.Key()
		if _, ok := m[k]; ok {
			continue
		}
		created := NormTime(in.CreatedAt)
		m[k] = impl.Message{
			Subscriber:    in.Subscriber,
			EventID:       in.EventID,
			Stream:        in.Stream,
			Pos:           in.Pos,
			Payload:       NormBytes(in.Payload),
			CreatedAt:     created,
			NextAttemptAt: created,
		}
		n++
	}
	s.messages = m
	return s, n
}

// EnqueueLeased is impl.LeasingEnqueuer's EnqueueLeased: Enqueue, except
// that a message whose LeaseOwner is set is stored with that owner and its
// LeaseUntil. inserted[i] says whether msgs[i] was inserted.
func (s Store) EnqueueLeased(msgs []impl.Message) (Store, []bool) {
	inserted := make([]bool, len(msgs))
	for i, in := range msgs {
		var n int
		s, n = s.Enqueue([]impl.Message{in})
		if n == 0 {
			continue
		}
		inserted[i] = true
		if in.LeaseOwner != "" {
			m := s.messages[in.Key()]
			m.LeaseOwner, m.LeaseUntil = in.LeaseOwner, NormTime(in.LeaseUntil)
			s.messages[in.Key()] = m
		}
	}
	return s, inserted
}

// queue returns the messages of subscriber ("" = all) in QueueOrder.
func (s Store) queue(subscriber string) []impl.Message {
	var out []impl.Message
	for _, m := range s.messages {
		if subscriber == "" || m.Subscriber == subscriber {
			out = append(out, NormMessage(m))
		}
	}
	slices.SortFunc(out, impl.QueueCompare)
	return out
}

// Claim leases up to req.Limit due messages in QueueOrder. A Limit of zero
// or less claims nothing.
func (s Store) Claim(req impl.ClaimRequest) (Store, []impl.Message) {
	now := impl.NanosOf(req.Now)
	leaseUntil := impl.TimeOf(now + int64(req.Lease))
	var claimed []impl.Message
	m := cloneMap(s.messages)
	for _, msg := range s.queue(req.Subscriber) {
		if len(claimed) >= req.Limit {
			break
		}
		if !Claimable(msg, req.Now) {
			continue
		}
		msg.LeaseOwner = req.Owner
		msg.LeaseUntil = leaseUntil
		m[msg.Key()] = msg
		claimed = append(claimed, NormMessage(msg))
	}
	s.messages = m
	return s, claimed
}

// Ack deletes the messages under keys, whoever leases them, and returns how
// many existed.
func (s Store) Ack(keys []impl.MessageKey) (Store, int) {
	m := cloneMap(s.messages)
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			delete(m, k)
			n++
		}
	}
	s.messages = m
	return s, n
}

// Fail records a failed attempt by the lease owner. Only a message whose
// LeaseOwner is owner is changed (expired or not: Fail has no "now"); the
// empty owner never holds a lease, so Fail with owner "" is always stale.
// The message keeps nextAttempt as NextAttemptAt even when it goes dead;
// Requeue overwrites it.
func (s Store) Fail(key impl.MessageKey, owner string, nextAttempt time.Time, maxAttempts int, reason string) (Store, impl.Message, bool) {
	msg, ok := s.messages[key]
	if !ok || owner == "" || msg.LeaseOwner != owner {
		return s, impl.Message{}, false
	}
	msg.Attempts++
	msg.LeaseOwner = ""
	msg.LeaseUntil = time.Time{}
	msg.LastError = reason
	msg.NextAttemptAt = NormTime(nextAttempt)
	if msg.Attempts >= maxAttempts {
		msg.Dead = true
	}
	m := cloneMap(s.messages)
	m[key] = msg
	s.messages = m
	return s, NormMessage(msg), true
}

// Requeue revives a dead message: Attempts 0, due at now. LastError is kept
// (it is history, and the contract does not clear it).
func (s Store) Requeue(key impl.MessageKey, now time.Time) (Store, bool) {
	msg, ok := s.messages[key]
	if !ok || !msg.Dead {
		return s, false
	}
	msg.Dead = false
	msg.Attempts = 0
	msg.NextAttemptAt = NormTime(now)
	m := cloneMap(s.messages)
	m[key] = msg
	s.messages = m
	return s, true
}

// ListMessages returns subscriber's messages ("" = all) in QueueOrder.
func (s Store) ListMessages(subscriber string) []impl.Message {
	return s.queue(subscriber)
}

// DeleteExpired deletes messages created strictly before cutoff that are
// not under an active lease at now.
func (s Store) DeleteExpired(cutoff, now time.Time) (Store, int) {
	c, n := impl.NanosOf(cutoff), impl.NanosOf(now)
	m := cloneMap(s.messages)
	deleted := 0
	for k, msg := range s.messages {
		if impl.NanosOf(msg.CreatedAt) < c && !leaseActive(msg, n) {
			delete(m, k)
			deleted++
		}
	}
	s.messages = m
	return s, deleted
}

// TrimPerSubscriber walks each subscriber's queue oldest first (CreatedAt,
// then EventID: QueueOrder) and deletes messages that are not under an
// active lease until the subscriber holds at most max. Leased messages are
// skipped but stay in the count, so a subscriber keeps every leased message
// plus its newest max-minus-leased others (more than max only when more
// than max are leased). A negative max is treated as zero.
func (s Store) TrimPerSubscriber(max int, now time.Time) (Store, int) {
	max = maxInt(max, 0)
	n := impl.NanosOf(now)
	bySub := map[string][]impl.Message{}
	for _, msg := range s.queue("") {
		bySub[msg.Subscriber] = append(bySub[msg.Subscriber], msg)
	}
	m := cloneMap(s.messages)
	deleted := 0
	for _, q := range bySub {
		excess := len(q) - max
		for _, msg := range q {
			if excess <= 0 {
				break
			}
			if leaseActive(msg, n) {
				continue
			}
			delete(m, msg.Key())
			deleted++
			excess--
		}
	}
	s.messages = m
	return s, deleted
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// GetDelivered returns (app, source)'s delivered items sorted by ID.
func (s Store) GetDelivered(app, source string) []impl.DeliveredItem {
	items := s.delivered[AppSource{app, source}]
	out := make([]impl.DeliveredItem, 0, len(items))
	for _, id := range slices.Sorted(maps.Keys(items)) {
		out = append(out, impl.DeliveredItem{ID: id, Version: items[id]})
	}
	return out
}

// RecordDelivered upserts items in order (a repeated ID: the last one wins)
// and then removes deleted. The contract leaves an ID in both lists
// unspecified; this model lets the delete win, and the suite never sends it.
func (s Store) RecordDelivered(app, source string, items []impl.DeliveredItem, deleted []string) Store {
	key := AppSource{app, source}
	cur := cloneMap(s.delivered[key])
	for _, it := range items {
		cur[it.ID] = it.Version
	}
	for _, id := range deleted {
		delete(cur, id)
	}
	d := cloneMap(s.delivered)
	if len(cur) == 0 {
		delete(d, key)
	} else {
		d[key] = cur
	}
	s.delivered = d
	return s
}

// MarkProcessed reports whether eventID is new for subscriber at now: never
// seen, or last recorded at or before now-window. Only a new event updates
// the record.
func (s Store) MarkProcessed(subscriber, eventID string, now time.Time, window time.Duration) (Store, bool) {
	key := impl.MessageKey{Subscriber: subscriber, EventID: eventID}
	n := impl.NanosOf(now)
	if last, ok := s.processed[key]; ok && last > n-int64(window) {
		return s, false
	}
	p := cloneMap(s.processed)
	p[key] = n
	s.processed = p
	return s, true
}

// Equal reports whether two states are observably the same.
func (s Store) Equal(o Store) bool {
	return mapsEqual(s.cursors, o.cursors, cursorsEqual) &&
		mapsEqual(s.messages, o.messages, messagesEqual) &&
		mapsEqual(s.delivered, o.delivered, func(a, b map[string]string) bool { return maps.Equal(a, b) }) &&
		maps.Equal(normNil(s.processed), normNil(o.processed))
}

func normNil[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}

func mapsEqual[K comparable, V any](a, b map[K]V, eq func(V, V) bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !eq(va, vb) {
			return false
		}
	}
	return true
}

func cursorsEqual(a, b impl.Cursor) bool {
	return a.Key == b.Key && a.Pos == b.Pos && bytes.Equal(a.Token, b.Token) && a.UpdatedAt == b.UpdatedAt
}

func messagesEqual(a, b impl.Message) bool {
	pa, pb := a.Payload, b.Payload
	a.Payload, b.Payload = nil, nil
	return reflect.DeepEqual(a, b) && bytes.Equal(pa, pb)
}

// Hash is consistent with Equal (porcupine uses it to skip comparisons).
func (s Store) Hash() uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s.String()))
	return h.Sum64()
}

// String is a canonical, sorted rendering of the whole state: two states are
// Equal exactly when their Strings are equal.
func (s Store) String() string {
	var b strings.Builder
	b.WriteString("{")
	for _, c := range s.ListCursors() {
		fmt.Fprintf(&b, " cursor%s", FormatCursor(c))
	}
	for _, m := range s.queue("") {
		fmt.Fprintf(&b, " msg%s", FormatMessage(m))
	}
	keys := slices.SortedFunc(maps.Keys(s.delivered), func(a, b AppSource) int {
		if c := strings.Compare(a.App, b.App); c != 0 {
			return c
		}
		return strings.Compare(a.Source, b.Source)
	})
	for _, k := range keys {
		fmt.Fprintf(&b, " delivered(%q,%q)=%v", k.App, k.Source, s.GetDelivered(k.App, k.Source))
	}
	pk := slices.SortedFunc(maps.Keys(s.processed), compareMessageKeys)
	for _, k := range pk {
		fmt.Fprintf(&b, " seen(%q,%q)@%s", k.Subscriber, k.EventID, FormatTime(impl.TimeOf(s.processed[k])))
	}
	b.WriteString(" }")
	return b.String()
}

func compareMessageKeys(a, b impl.MessageKey) int {
	if c := strings.Compare(a.Subscriber, b.Subscriber); c != 0 {
		return c
	}
	return strings.Compare(a.EventID, b.EventID)
}

// FormatTime renders an instant exactly, in UTC ("0" for the zero time).
func FormatTime(t time.Time) string {
	if impl.NanosOf(t) == 0 {
		return "0"
	}
	return NormTime(t).Format(time.RFC3339Nano)
}

// FormatPos renders a position as major.minor/id.
func FormatPos(p impl.Position) string { return fmt.Sprintf("%d.%d/%q", p.Major, p.Minor, p.ID) }

// FormatCursor renders every field of c.
func FormatCursor(c impl.Cursor) string {
	return fmt.Sprintf("(%q,%q pos=%s token=%x at=%s)", c.Key.Stream, c.Key.Subscriber, FormatPos(c.Pos), c.Token, FormatTime(c.UpdatedAt))
}

// FormatMessage renders every field of m.
func FormatMessage(m impl.Message) string {
	s := fmt.Sprintf("(%q,%q stream=%q pos=%s payload=%x created=%s attempts=%d next=%s",
		m.Subscriber, m.EventID, m.Stream, FormatPos(m.Pos), m.Payload, FormatTime(m.CreatedAt), m.Attempts, FormatTime(m.NextAttemptAt))
	if m.LeaseOwner != "" || !m.LeaseUntil.IsZero() {
		s += fmt.Sprintf(" lease=%q until=%s", m.LeaseOwner, FormatTime(m.LeaseUntil))
	}
	if m.Dead {
		s += " dead"
	}
	if m.LastError != "" {
		s += fmt.Sprintf(" err=%q", m.LastError)
	}
	return s + ")"
}
