// Package impl holds the store contract that every deliverysim backend
// implements, the types it speaks, and (in sub-packages) the reference
// delivery engine and the backends themselves.
//
// The contract is the complete durable state of a delivery engine as the
// source documents describe it: resume cursors (seed 000, seed 004), the
// per-subscriber message queue with in-flight and dead-letter state (seed 000,
// seed 001), retention (seed 003), per-(app, source) delivered state (seed
// 002) and the receiver's dedup cache (seed 000, seed 004).
//
// Time never comes from the backend. Every method that needs "now" takes it
// as an argument, so that the same sequence of calls gives the same results
// on every backend and under the simulator's virtual clock. Backends store
// instants with nanosecond precision (Postgres: BIGINT Unix nanoseconds) so
// a value read back is == to the value written: every instant a backend
// returns is impl.TimeOf(impl.NanosOf(t)) of the one written (UTC,
// nanoseconds intact, no monotonic reading), whatever the zone it was
// written in and whatever the time zone of the backend's session.
//
// The caller owns the slices it passes to a method and the ones it gets
// back: a backend keeps no reference to the former and returns copies of
// its state, so mutating either never changes what is stored.
//
// The conformance package checks every rule stated here; each of its
// Contract checks names the sentence it enforces.
package impl

import (
	"context"
	"errors"
	"time"
)

// Store is everything the delivery engine persists. Implementations must be
// safe for concurrent use by several engine nodes. Every method is atomic:
// after an error the call either took full effect or none (an ambiguous
// outcome — committed, but the caller saw an error — is allowed only when the
// error wraps ErrAmbiguous or is a transport error, and then the caller must
// assume either).
//
// Errors. A store that works returns no error: the outcomes the contract
// describes (an absent key, a refused cursor, a stale Fail, a duplicate
// MarkProcessed) are results, never errors. An error has one of three
// causes, and each takes no effect unless it says otherwise:
//   - the context: a call whose context is already done returns an error
//     and takes no effect;
//   - the store's life: after Close every method returns an error;
//   - a fault (a lost connection, a full disk, a killed session): no
//     effect, unless the error wraps ErrAmbiguous or is a transport error,
//     after which the call may have taken full effect or none.
//
// A conflict between concurrent calls (a serialization failure, a deadlock)
// is none of these causes: the store resolves it itself, retrying while the
// caller's context lives, so that how busy the machine is never decides
// whether a call fails. A store that returns such a conflict while the
// context lives has broken the contract, however often it tried.
type Store interface {
	// GetCursor returns the cursor stored under key, and false if there is none.
	GetCursor(ctx context.Context, key CursorKey) (Cursor, bool, error)

	// ListCursors returns every stored cursor, sorted by key (Stream, then
	// Subscriber, each compared bytewise as Go compares strings, never by a
	// locale's collation). The engine calls it on start to resume.
	ListCursors(ctx context.Context) ([]Cursor, error)

	// AdvanceCursors writes each cursor only if its Pos is strictly greater
	// than the stored one's (or none is stored): a conditional upsert, never
	// a blind one, so a cursor cannot regress even under concurrent writers.
	// The i-th result says whether cs[i] was written. Within one call the
	// cursors are applied in order, so a later entry for the same key sees
	// the earlier one.
	AdvanceCursors(ctx context.Context, cs []Cursor) ([]bool, error)

	// Enqueue inserts messages, idempotent on (Subscriber, EventID): a message
	// whose key is already present (queued, leased or dead) is left untouched.
	// Only Subscriber, EventID, Stream, Pos, Payload and CreatedAt are read
	// from the input; NextAttemptAt starts at CreatedAt, Attempts at 0.
	// It returns how many were inserted. A key that was acked or purged is
	// absent again, so enqueueing it again inserts it.
	Enqueue(ctx context.Context, msgs []Message) (int, error)

	// Claim leases up to req.Limit due messages: not dead, NextAttemptAt <=
	// req.Now, and no active lease (LeaseUntil <= req.Now). If req.Subscriber
	// is set only that subscriber's messages are considered. Messages are
	// chosen and returned in QueueOrder. Each claimed message gets
	// LeaseOwner = req.Owner and LeaseUntil = req.Now + req.Lease; the
	// returned copies show the new lease. (Postgres uses plain FOR UPDATE:
	// SKIP LOCKED can pass over a message that is due whichever way a
	// concurrent claim ends, which the linearizability check rejects.)
	Claim(ctx context.Context, req ClaimRequest) ([]Message, error)

	// Ack deletes the messages with the given keys: the delivery succeeded.
	// Deleting happens only here, after success (plus Retention and the
	// dead-letter path below). Absent keys are ignored; it returns how many
	// were deleted. The lease is not checked: a delivered message is done,
	// whoever holds it now.
	Ack(ctx context.Context, keys []MessageKey) (int, error)

	// Fail records a failed attempt for req.Key leased by req.Owner:
	// Attempts is incremented, the lease cleared, LastError set to
	// req.Reason, and NextAttemptAt set to req.NextAttempt. When Attempts
	// reaches req.MaxAttempts the message becomes dead instead of due
	// again. A Fail that makes a message dead still sets NextAttemptAt to
	// req.NextAttempt, like every other recorded Fail (a dead message is
	// never claimed, whatever its NextAttemptAt, and Requeue sets it
	// again). It returns the message as stored afterwards, and false (no
	// error) if the key is absent or its lease is held by someone else
	// (the failure is stale and ignored).
	Fail(ctx context.Context, req FailRequest) (Message, bool, error)

	// Requeue makes a dead message live again with Attempts = 0 and
	// NextAttemptAt = now. Requeue keeps LastError (why the message died)
	// and every other field: the message stays the one row it was. It
	// returns false if the key is absent or not dead.
	Requeue(ctx context.Context, key MessageKey, now time.Time) (bool, error)

	// ListMessages returns the messages of one subscriber ("" = all), in
	// QueueOrder, including leased and dead ones, however many there are
	// and however many share a CreatedAt. A store holds at most one
	// message per (Subscriber, EventID), so no key is listed twice.
	ListMessages(ctx context.Context, subscriber string) ([]Message, error)

	// DeleteExpired deletes messages with CreatedAt < cutoff, except those
	// under an active lease (LeaseUntil > now): a message being delivered is
	// never purged. It returns how many it deleted.
	DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error)

	// TrimPerSubscriber keeps at most max messages per subscriber, deleting
	// the oldest (by CreatedAt, then EventID) first; messages under an active
	// lease are never deleted but do count toward the cap. It returns how
	// many it deleted.
	TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error)

	// GetDelivered returns the delivered state of (app, source): each item id
	// with the version the app last received, sorted by ID.
	GetDelivered(ctx context.Context, app, source string) ([]DeliveredItem, error)

	// RecordDelivered upserts items (setting their version) and removes the
	// ids in deleted, atomically.
	RecordDelivered(ctx context.Context, app, source string, items []DeliveredItem, deleted []string) error

	// MarkProcessed records that req.Subscriber processed req.EventID at
	// req.Now. It returns true if the event is new: never seen, or last
	// seen at or before req.Now - req.Window (the entry expired). A
	// duplicate within the window returns false and does not refresh the
	// entry.
	MarkProcessed(ctx context.Context, req MarkRequest) (bool, error)

	// Close releases the backend's resources; every later call returns an
	// error.
	Close() error
}

// ErrAmbiguous marks an error after which the operation may or may not have
// taken effect (for example a connection lost during COMMIT).
var ErrAmbiguous = errors.New("store: outcome unknown (the operation may have committed)")

// CursorKey names a cursor: a stream's resume cursor (Subscriber == "") or a
// per-(subscriber, source) cursor.
type CursorKey struct {
	Stream     string
	Subscriber string
}

// Less orders keys by Stream, then Subscriber.
func (k CursorKey) Less(o CursorKey) bool {
	if k.Stream != o.Stream {
		return k.Stream < o.Stream
	}
	return k.Subscriber < o.Subscriber
}

// Position is a totally ordered point in a stream. Log streams (seed 000)
// use Major = miniblock number, Minor = index of the event in it (the
// minipool is miniblock "last sealed + 1"). Timestamp cursors (seed 004) use
// Major = created_at (Unix milliseconds), Minor = 0 and ID = the event id,
// compared lexicographically as the tie-break. Compare is the single
// comparator every component uses.
type Position struct {
	Major int64
	Minor int64
	ID    string
}

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.Major != q.Major:
		if p.Major < q.Major {
			return -1
		}
		return 1
	case p.Minor != q.Minor:
		if p.Minor < q.Minor {
			return -1
		}
		return 1
	case p.ID != q.ID:
		if p.ID < q.ID {
			return -1
		}
		return 1
	}
	return 0
}

// Cursor is a durable resume point: an ordered position plus opaque bytes
// (for log streams, the sync cookie: minipool generation and previous
// miniblock hash).
type Cursor struct {
	Key       CursorKey
	Pos       Position
	Token     []byte
	UpdatedAt time.Time
}

// MessageKey identifies a queued message.
type MessageKey struct {
	Subscriber string
	EventID    string
}

// Message is one (subscriber, event) delivery obligation held in the queue.
type Message struct {
	Subscriber    string
	EventID       string
	Stream        string
	Pos           Position
	Payload       []byte
	CreatedAt     time.Time // when it was enqueued (engine clock); retention ages it from here
	Attempts      int
	NextAttemptAt time.Time
	LeaseOwner    string
	LeaseUntil    time.Time // zero when not leased
	Dead          bool
	LastError     string
}

// Key returns the message's key.
func (m Message) Key() MessageKey { return MessageKey{m.Subscriber, m.EventID} }

// QueueLess is QueueOrder: by Subscriber, then CreatedAt, then EventID.
func QueueLess(a, b Message) bool {
	if a.Subscriber != b.Subscriber {
		return a.Subscriber < b.Subscriber
	}
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.EventID < b.EventID
}

// QueueCompare is QueueLess as a three-way comparison, for slices.SortFunc.
func QueueCompare(a, b Message) int {
	switch {
	case QueueLess(a, b):
		return -1
	case QueueLess(b, a):
		return 1
	}
	return 0
}

// ClaimRequest parameters Store.Claim.
type ClaimRequest struct {
	Subscriber string // "" = any subscriber
	Owner      string
	Now        time.Time
	Lease      time.Duration
	Limit      int
}

// FailRequest parameters Store.Fail.
type FailRequest struct {
	Key         MessageKey
	Owner       string    // the lease holder failing it; another owner's failure is stale
	NextAttempt time.Time // when the message is due again
	MaxAttempts int       // Attempts reaching this makes the message dead
	Reason      string    // stored as LastError
}

// MarkRequest parameters Store.MarkProcessed.
type MarkRequest struct {
	Subscriber string
	EventID    string
	Now        time.Time
	Window     time.Duration
}

// RetentionDrops is how many of one subscriber's messages retention has
// deleted (DeleteExpired and TrimPerSubscriber), by rule, since the store
// was created (seed 003's counters, kept durably).
type RetentionDrops struct {
	Subscriber string
	TTL, Cap   int64
}

// RetentionCounter is a store that counts its retention deletions durably,
// in the same commit as the deletions, so a count survives exactly what
// its deletions survive. It is not an engine capability (the engine never
// reads it): the reference runtime reports it on the protocol's
// observation endpoint (runtime/PROTOCOL.md, Observation).
type RetentionCounter interface {
	// RetentionDrops lists the subscribers with a drop, sorted by
	// Subscriber.
	RetentionDrops(ctx context.Context) ([]RetentionDrops, error)
}

// DeliveredItem is one item of snapshot-style delivered state (seed 002: a
// file path and its sha).
type DeliveredItem struct {
	ID      string
	Version string
}

// Clock is the injected time source. The simulator's advances only when it
// says so; the real runtime's reads the wall clock.
type Clock interface {
	Now() time.Time
}

// Optional capabilities.
//
// A capability beyond Store (BlindCursorWriter, LeasingEnqueuer,
// HandOffWriter) is an extra
// interface, and callers discover it only with AsBlindCursorWriter and
// AsLeasingEnqueuer, never with a bare type assertion. A store that wraps
// another (a fault injector, an observer, a counter) implements Wrapper:
// it may then forward every optional method unconditionally, and the As
// functions report a capability only when every layer down the Unwrap chain
// has it, so a wrapper cannot make a backend look more capable than it is.
// The conformance suite finds a store's capabilities with the same
// functions and certifies every one it finds (the engine uses every one it
// finds); a Factory declares nothing to get them checked, and opts a found
// one out explicitly (conformance.Features.OptOut). A wrapper that hides
// a capability it could forward (it embeds Store but lacks the method) is
// reported: a Factory may assert its capabilities (conformance.Features),
// and a declared capability that is not discoverable fails the suite, as
// does one the Unwrap chain has below a layer that drops it.

// Wrapper is a Store that forwards to another Store.
type Wrapper interface {
	Unwrap() Store
}

// AsBlindCursorWriter returns s's BlindCursorWriter if s and every store
// under it (through Wrapper) has one.
func AsBlindCursorWriter(s Store) (BlindCursorWriter, bool) {
	return capability[BlindCursorWriter](s)
}

// AsLeasingEnqueuer returns s's LeasingEnqueuer if s and every store under
// it (through Wrapper) has one.
func AsLeasingEnqueuer(s Store) (LeasingEnqueuer, bool) {
	return capability[LeasingEnqueuer](s)
}

// AsHandOffWriter returns s's HandOffWriter if s and every store under it
// (through Wrapper) has one.
func AsHandOffWriter(s Store) (HandOffWriter, bool) {
	return capability[HandOffWriter](s)
}

// HiddenCapabilities names the optional capabilities some store under s
// (through Wrapper) has but a layer above it drops: a wrapper that should
// forward them and does not.
func HiddenCapabilities(s Store) []string {
	var out []string
	if _, ok := AsBlindCursorWriter(s); !ok && below[BlindCursorWriter](s) {
		out = append(out, "BlindCursorWriter")
	}
	if _, ok := AsLeasingEnqueuer(s); !ok && below[LeasingEnqueuer](s) {
		out = append(out, "LeasingEnqueuer")
	}
	if _, ok := AsHandOffWriter(s); !ok && below[HandOffWriter](s) {
		out = append(out, "HandOffWriter")
	}
	return out
}

func capability[C any](s Store) (C, bool) {
	c, ok := any(s).(C)
	if !ok {
		return c, false
	}
	for w, isW := s.(Wrapper); isW; w, isW = s.(Wrapper) {
		s = w.Unwrap()
		if _, ok := any(s).(C); !ok {
			var zero C
			return zero, false
		}
	}
	return c, true
}

// below reports whether any store under s (through Wrapper) implements C.
func below[C any](s Store) bool {
	for w, isW := s.(Wrapper); isW; w, isW = s.(Wrapper) {
		s = w.Unwrap()
		if _, ok := any(s).(C); ok {
			return true
		}
	}
	return false
}

// BlindCursorWriter is the "today" cursor write of seed 000: an
// unconditional upsert (INSERT ... ON CONFLICT DO UPDATE) with no monotonic
// guard. It exists only so the known-bug engine variant can use it; the
// reference engine never does. Both backends implement it.
type BlindCursorWriter interface {
	PutCursorBlind(ctx context.Context, c Cursor) error
}

// LeasingEnqueuer is an optional capability of a Store. A replaying engine
// enqueues each message and claims it again at once to send it; a store
// with this capability does both in one write, so a message costs an
// insert and a delete instead of an insert, an update and a delete (on
// Postgres: one statement fewer per batch, and no second version of every
// row). The engine uses it when AsLeasingEnqueuer finds it and falls back to
// Enqueue and Claim otherwise; the results are the same.
type LeasingEnqueuer interface {
	// EnqueueLeased is Enqueue, except that a message whose LeaseOwner is
	// set is inserted already leased: LeaseOwner and LeaseUntil are stored
	// as given (Attempts 0, NextAttemptAt = CreatedAt, as for Enqueue). A
	// key already present (queued, leased or dead) is left untouched, and
	// when a key repeats within msgs the first entry is the one inserted.
	// inserted[i] says whether msgs[i] was inserted: a leased message is
	// the caller's to send only if it was.
	EnqueueLeased(ctx context.Context, msgs []Message) (inserted []bool, err error)
}

// HandOffWriter is an optional capability of a Store: the writes of one
// queued hand-off step as one atomic call. On Postgres each call is a
// transaction and each commit waits for the disk, so an engine that acks
// one batch, inserts the next and moves the cursor in three calls pays
// three commits per batch where one does.
type HandOffWriter interface {
	// WriteHandOff is, as one atomic call, Ack(w.Ack), then
	// EnqueueLeased(w.Enqueue), then AdvanceCursors(w.Cursors), each with
	// exactly its own results (HandOffResult), and each step seeing the
	// ones before it: a key both acked and enqueued is inserted again.
	// After an error none of it took effect, unless the error wraps
	// ErrAmbiguous (or is a transport error): then all of it or none did.
	WriteHandOff(ctx context.Context, w HandOffWrite) (HandOffResult, error)
}

// HandOffWrite is the input of HandOffWriter.WriteHandOff. Any part may be
// empty.
type HandOffWrite struct {
	Ack     []MessageKey
	Enqueue []Message
	Cursors []Cursor
}

// HandOffResult is what each part of a HandOffWrite returned: Acked as
// from Ack, Inserted as from EnqueueLeased (nil for no messages), Written
// as from AdvanceCursors (nil for no cursors).
type HandOffResult struct {
	Acked    int
	Inserted []bool
	Written  []bool
}

// NanosOf converts an instant to the Unix nanoseconds backends store; the
// zero time maps to 0.
func NanosOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// TimeOf is the inverse of NanosOf, always in UTC so values read back from
// any backend compare == to each other.
func TimeOf(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
