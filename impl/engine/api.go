// Package engine is the reference delivery engine: a sans-IO state machine in
// the style of etcd's raft. A runtime (the deterministic simulator in sim/,
// or a real runtime with goroutines, net/http and pgx) feeds it Inputs with
// Step and carries out the Effects it returns from Ready.
//
// The engine never reads a clock (time comes in Config.Clock), never starts a
// goroutine, never draws from global randomness (jitter uses Config.Rand),
// and never lets Go map iteration order reach its output (keys are sorted).
// It talks to the durable store synchronously through impl.Store; the store
// is injected, so the simulator can fail its calls.
//
// THIS FILE IS THE CONTRACT between the engine and its runtimes. Change it
// only together with every runtime.
package engine

import (
	"errors"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// ErrCrashed is returned by Step when Config.CrashHook asked the engine to
// crash at a named crash point. The engine is unusable afterwards: the
// runtime throws it away and builds a new one (memory lost, store kept).
var ErrCrashed = errors.New("engine: crashed at crash point")

// CrashPoint names a place in the engine where a crash is most interesting.
type CrashPoint string

const (
	CrashAfterStoreWriteBeforeSend CrashPoint = "after-store-write-before-send"
	CrashAfterSendBeforeAck        CrashPoint = "after-send-before-ack"
	CrashAfterProcessBeforeCursor  CrashPoint = "after-process-before-cursor"
)

// StreamKind selects the cursor kind of a stream.
type StreamKind int

const (
	// LogStream: positions are (miniblock, index); the upstream replays
	// every event strictly after a cursor (seed 000 sync cookies).
	LogStream StreamKind = iota
	// TimestampStream: positions are (created_at ms, 0, id); the upstream
	// only filters coarsely by created_at >= since, the engine filters the
	// rest with the composite comparator (seed 004).
	TimestampStream
)

// CursorMode selects how the engine persists stream cursors.
type CursorMode int

const (
	// CursorSync: the engine writes the cursor itself, synchronously, after
	// everything at or before it was handed off durably.
	CursorSync CursorMode = iota
	// CursorAsync: fire-and-forget (seed 000's design). The engine emits a
	// CursorWrite effect; the runtime performs it whenever it likes (it may
	// be delayed, reordered, or lost in a crash) with the store's monotonic
	// conditional upsert, then reports back with CursorWriteDone.
	CursorAsync
)

// HandOff selects how a new event reaches a bot that can take it at once.
type HandOff int

const (
	// HandOffQueued: every (bot, event) obligation is written to the queue
	// before it is sent (already leased to this node when the store is an
	// impl.LeasingEnqueuer), and the row is deleted after the 2xx. The
	// cursor moves over events as soon as their rows are durable.
	HandOffQueued HandOff = iota
	// HandOffDirect: an obligation whose bot can take it now (key
	// published, breaker closed, a free request slot, nothing of its queued
	// ahead) is sent with no queue row, and the stream's cursor does not
	// pass it until its answer is in. A 2xx needs no store write at all; a
	// failure, or no answer within a lease, writes the row then, as a failed
	// attempt with its backoff. A crash loses only unanswered direct sends,
	// and the cursor still lies before them, so the upstream replays them:
	// at-least-once holds with one cursor write per batch instead of a row
	// insert and delete per delivery. It needs an impl.LeasingEnqueuer (a
	// failed attempt is recorded on a row the engine holds); with any other
	// store the engine hands off queued.
	HandOffDirect
)

// Bugs switches on the "today" behaviours of the source documents. The
// reference engine runs with the zero value. Each one must be caught by the
// harness.
type Bugs struct {
	FreshSyncOnBoot       bool // seed 000 problem 1: on start, subscribe from the upstream head, ignoring cursors
	DeleteBeforeSend      bool // seed 000 race: ack (delete) a queued message when it is claimed, before the send
	NoRequeueOnFailure    bool // seed 000 problem 3: a failed send is dropped (acked) instead of retried
	NoRetention           bool // seed 000 problem 4: the cleaner never runs
	UnguardedCursorWrites bool // seed 000: cursor written blind (impl.BlindCursorWriter), before hand-off, fire-and-forget
	TimestampOnlyCursor   bool // seed 004: compare/resume timestamp cursors on created_at alone
	NoReceiverDedup       bool // seed 000: the bot SDK has no seen-event cache (receiver-side switch)

	SharedSnapshotBaseline   bool // seed 002: changes computed against one per-source snapshot, not per app
	BreakerDropsWhenOpen     bool // seed 001: an open breaker fails fast and drops (the "fallback") instead of deferring
	NoClockSkewBudget        bool // seed 003: the TTL is judged by the cleaner's clock alone, so a fast clock shortens it
	RetentionIgnoresLease    bool // seed 003: cleanup deletes by age/count even while a message is being delivered
	TrimKeepsOldest          bool // seed 003: the per-bot cap deletes the newest messages instead of the oldest
	UnboundedRetry           bool // seed 001 / 004 I5: no dead letter; a poison message is retried forever
	SharedInflightSlot       bool // one send in flight across all bots: a slow or dead bot holds up the rest
	PurgeQueueOnLeave        bool // seed 000 tracking scope: a bot leaving a stream loses what was queued for it there
	ForgetUnconfirmedCreates bool // seed 002 as written: an item is recorded only after a 2xx, so a CREATE whose answer was lost is never deleted
	// CursorBeforeDirectAnswer: with HandOffDirect, the cursor moves over
	// direct sends when they are sent, not when they are answered, so a
	// crash in between loses them (the engine hands off direct under this
	// bug whatever Config.HandOff says).
	CursorBeforeDirectAnswer bool
}

// Bot is a subscriber as the registry knows it.
type Bot struct {
	ID     string
	Secret []byte // HMAC key for webhook-signature
	HasKey bool   // the bot has published its session key
}

// Membership says that Bot is (Member) or is not a member of Stream for
// events at positions strictly after From. The registry's timeline of these
// decides who is owed which event.
type Membership struct {
	Stream string
	Kind   StreamKind
	Bot    string
	From   impl.Position
	Member bool
}

// Registry is the durable registry of bots and memberships (it lives outside
// the engine, like the App Registry's database). Start hands the whole of it
// to a booting engine.
type Registry struct {
	Bots        []Bot        // sorted by ID
	Memberships []Membership // in the order they were made
}

// Event is one upstream event.
type Event struct {
	ID        string
	Stream    string
	Pos       impl.Position
	Payload   []byte
	CreatedAt time.Time // producer's stamp; for timestamp streams Pos.Major = CreatedAt in ms
}

// Input is what a runtime feeds the engine.
type Input interface{ isInput() }

// Start boots the engine (first boot or after a crash): it loads cursors from
// the store and emits Subscribe effects.
type Start struct{ Registry Registry }

// UpstreamBatch delivers events of one stream (possibly duplicated or out of
// order) together with the sync cookie after them.
type UpstreamBatch struct {
	Stream string
	Kind   StreamKind
	Events []Event
	Cookie []byte
}

// Outcome classifies a webhook attempt's result.
type Outcome int

const (
	OutcomeOK      Outcome = iota // 2xx
	OutcomeStatus                 // non-2xx status (Status says which)
	OutcomeTimeout                // no answer within the timeout (the bot may have processed it)
	OutcomeRefused                // connection refused / unreachable
)

// WebhookResult answers a Send. A runtime should report every Send's
// outcome, by Send.Timeout at the latest; one that never does (an HTTP
// client without a working timeout, a worker that died after sending) is
// survived: the engine gives up on a request it has waited on for a Lease,
// at its next housekeeping (every CleanupInterval), so an unreported Send
// holds its message at most Lease + CleanupInterval. It then frees the
// request's slot; a message sent from a queue row is claimed again once
// that row's lease has lapsed, and one sent without a row (HandOffDirect)
// is written to the queue as a failed attempt, due at once. A result that
// arrives after that is ignored.
type WebhookResult struct {
	RequestID uint64
	Outcome   Outcome
	Status    int
}

// WebhookResults answers several Sends at once, in order: a runtime that
// collected results while the engine was busy hands them over together.
// The effect on the store, the counters and the effects is that of feeding
// each as a WebhookResult, except that the successes are acknowledged with
// one store call (impl.Store.Ack of all their keys) instead of one each,
// the crash point CrashAfterSendBeforeAck is asked once for that call, and
// each bot's queue is refilled once, after the whole batch. Their "acked"
// notes carry Count 1 when the store deleted every key of the call; when it
// deleted fewer (some were already gone) each carries Count -1 and Detail
// says how many of how many were deleted.
type WebhookResults struct{ Results []WebhookResult }

// TimerFired wakes the engine for a timer it asked for.
type TimerFired struct{ TimerID uint64 }

// KeyPublished: a bot published its session key; its queue is flushed.
type KeyPublished struct{ Bot string }

// MembershipChanged: the registry changed (a new entry at the end of
// Registry.Memberships).
type MembershipChanged struct{ Membership Membership }

// BotAdded registers a new bot.
type BotAdded struct{ Bot Bot }

// CursorWriteDone reports an async cursor write's completion.
type CursorWriteDone struct {
	WriteID uint64
	Err     error
}

// RequeueDead makes a dead letter live again (operator action).
type RequeueDead struct{ Key impl.MessageKey }

// SourceState is the current state of a snapshot source (seed 002): the
// engine delivers to each subscribed app the difference between this and
// what that app already has.
type SourceState struct {
	Source string
	Apps   []string // apps subscribed to the source, sorted
	Items  []impl.DeliveredItem
}

func (Start) isInput()             {}
func (UpstreamBatch) isInput()     {}
func (WebhookResult) isInput()     {}
func (WebhookResults) isInput()    {}
func (TimerFired) isInput()        {}
func (KeyPublished) isInput()      {}
func (MembershipChanged) isInput() {}
func (BotAdded) isInput()          {}
func (CursorWriteDone) isInput()   {}
func (RequeueDead) isInput()       {}
func (SourceState) isInput()       {}

// Subscribe asks the upstream to deliver Stream. Fresh: only events that
// arrive from now on (the upstream head). Otherwise: LogStream — every event
// with Pos > From; TimestampStream — every event with Pos.Major >= Since
// (coarse, inclusive).
type Subscribe struct {
	Stream string
	Kind   StreamKind
	Fresh  bool
	From   impl.Position
	Since  int64
	Token  []byte
}

// Send is one webhook request (Standard Webhooks headers).
type Send struct {
	RequestID uint64
	Bot       string
	EventID   string // also the webhook-id header: stable across retries
	Stream    string
	Pos       impl.Position
	Timestamp int64  // webhook-timestamp, Unix seconds of the engine clock
	Signature string // webhook-signature: "v1,<base64 HMAC-SHA256(id.timestamp.body)>"
	Body      []byte
	Timeout   time.Duration
	Attempt   int  // 1-based attempt number of this message
	Snapshot  bool // a seed-002 change notification (Body describes the change)
}

// Timer asks to be woken with TimerFired{ID} at At.
type Timer struct {
	ID uint64
	At time.Time
}

// CursorWrite is an async cursor write (CursorAsync mode). Blind means the
// buggy unguarded write (impl.BlindCursorWriter) instead of AdvanceCursors.
type CursorWrite struct {
	WriteID uint64
	Cursor  impl.Cursor
	Blind   bool
}

// Ready is the batch of effects accumulated since the last call.
type Ready struct {
	Subscribes   []Subscribe
	Sends        []Send
	Timers       []Timer
	CursorWrites []CursorWrite
	Notes        []Note // what happened, for the trace and the checker
}

// Note records an engine-side fact the checker needs (a dead letter, a
// retention drop, a breaker transition, a cursor persisted, ...).
type Note struct {
	Kind    string // "enqueued", "acked", "delivered" (a direct send's 2xx: no row to delete), "dead", "retention-ttl", "retention-cap", "breaker", "cursor", "dropped", "store-error"
	Bot     string
	EventID string
	Stream  string
	Pos     impl.Position
	Count   int
	Detail  string
}

// Counters are the engine's running totals (Prometheus-style, per kind).
type Counters struct {
	Enqueued, Sent, Acked, Failed, DeadLettered, Requeued int
	// SentDirect counts the sends of HandOffDirect (no queue row), and
	// Delivered their 2xx answers; both are included in Sent and Acked.
	SentDirect, Delivered                    int
	RetentionTTL, RetentionCap               int
	BreakerOpened, StoreErrors, CursorWrites int
}
