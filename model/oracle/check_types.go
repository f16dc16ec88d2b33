package oracle

import (
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Stable invariant names: they appear in reports, JSON and scenario files.
const (
	InvNoSilentLoss       = "no-silent-loss"
	InvNoPhantomDelivery  = "no-phantom-delivery"
	InvCursorMonotonic    = "cursor-monotonic"
	InvCursorLowWatermark = "cursor-low-watermark"
	InvIdempotentReplay   = "idempotent-replay"
	InvRetentionBounds    = "retention-bounds"
	InvBoundedRetry       = "bounded-retry"
	InvNoHeadOfLine       = "no-head-of-line-blocking"
	InvLiveness           = "liveness"
	// Seed 002: every app subscribed to a snapshot source ends with the
	// source's current state (convergence), and what an app is sent is
	// computed from what that app has, never from another app's progress
	// (isolation).
	InvSnapshotConvergence = "snapshot-convergence"
	InvSnapshotIsolation   = "snapshot-isolation"
	// Issue 9, judged from the wire and the store only (check_wire.go):
	// a dead letter in the store's committed state follows MaxAttempts
	// failures the bots really answered (dead-letter-earned); a healthy
	// receiver never rejects what the engine signed (signed-requests-verify);
	// a retry's next-attempt time keeps the backoff bounds, no send
	// precedes it, a retry follows within the longest backoff, and a
	// request whose outcome its node is never told is sent again within a
	// lease and a cleanup interval more (retry-backoff); after the heal every stream with a member
	// reaches its last event with its durable cursor (cursor-progress).
	InvDeadLetterEarned = "dead-letter-earned"
	InvSignedVerify     = "signed-requests-verify"
	InvRetryBackoff     = "retry-backoff"
	InvCursorProgress   = "cursor-progress"
	// receiver-dedup-bounds (check_dedup.go): a receiver remembers a
	// handled id exactly within its window and entry bounds.
	InvReceiverDedupBounds = "receiver-dedup-bounds"
	// acked-after-delivery (check_drain.go): a message whose 2xx reached
	// an engine leaves the queue. At the end of the run no live row may
	// remain whose first 2xx since the row was (re)created reached a node
	// more than half the liveness bound before the end (counted from the
	// heal for 2xx answers during the fault window). During the run
	// (check_ackprompt.go), a node told of the 2xx of the request it sent
	// from a row it holds removes the row within its declared AckDelay.
	InvAckedAfterDelivery = "acked-after-delivery"
	// settings-validation is judged by the simulator, not from
	// observations (sim/settings.go): the reference engine refuses a
	// configuration with a setting outside its documented range, naming
	// it, and accepts every one inside.
	InvSettingsValidation = "settings-validation"
	// breaker-policy (check_breaker.go): a node's per-bot circuit breaker
	// opens after BreakerFailures consecutive failures it was told of, and
	// the node then sends the bot nothing for BreakerOpenFor; half-open, it
	// has at most one request in flight until BreakerCloseAfter successes.
	InvBreakerPolicy = "breaker-policy"
	// reported-counters is judged by the simulator (sim/counters.go): the
	// counters an engine process reports about itself (serve's /metrics)
	// agree with what the world saw that process do.
	InvReportedCounters = "reported-counters"
	// resume-from-cursor (check_resume.go): a node that read the stored
	// cursors resumes each stream from exactly its cursor (log streams:
	// its position and sync cookie; timestamp streams: within the declared
	// lookback before it), neither skipping nor replaying more.
	InvResumeFromCursor = "resume-from-cursor"
	// in-flight-limit (check_inflight.go): a node has at most
	// MaxInFlightPerBot requests to one bot it has not been told the
	// outcome of.
	InvInFlightLimit = "in-flight-limit"
	// resend-with-cause (check_resend.go): a node told a 2xx for a message
	// whose row has left the store (or that had none) does not send it
	// again in that incarnation without a cause the world shows since: a
	// new arrival of the event, a membership change of its stream, a store
	// fault told to the node, or a row of it inserted by another node.
	InvResendWithCause = "resend-with-cause"
	// snapshot-progress (check_snapprompt.go): seed 002's worker sends an
	// app that lacks its source's current state the next change right
	// after a 2xx of the previous one reaches a node, and whenever the
	// snapshot worker hands a node the source's state (which also revives
	// a change given up after MaxAttempts failures).
	InvSnapshotProgress = "snapshot-progress"
)

// Invariants lists every invariant Check evaluates, in report order.
func Invariants() []string {
	return []string{
		InvNoSilentLoss, InvNoPhantomDelivery, InvCursorMonotonic, InvCursorLowWatermark,
		InvIdempotentReplay, InvRetentionBounds, InvBoundedRetry, InvNoHeadOfLine, InvLiveness,
		InvSnapshotConvergence, InvSnapshotIsolation,
		InvDeadLetterEarned, InvSignedVerify, InvRetryBackoff, InvCursorProgress,
		InvReceiverDedupBounds, InvAckedAfterDelivery, InvSettingsValidation, InvBreakerPolicy,
		InvReportedCounters, InvResumeFromCursor, InvInFlightLimit, InvResendWithCause, InvSnapshotProgress,
	}
}

// Violation is one broken invariant, located well enough to find it in the
// trace: the invariant, the bot and event concerned (when there is one), the
// virtual time and the trace step.
type Violation struct {
	Invariant string    `json:"invariant"`
	Bot       string    `json:"bot,omitempty"`
	Event     string    `json:"event,omitempty"`
	Time      time.Time `json:"time"`
	Step      int64     `json:"step"`
	Detail    string    `json:"detail"`
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s step=%d t=%s", v.Invariant, v.Step, v.Time.UTC().Format(time.RFC3339Nano))
	if v.Bot != "" {
		s += " bot=" + v.Bot
	}
	if v.Event != "" {
		s += " event=" + v.Event
	}
	return s + ": " + v.Detail
}

// ObsKind says what an Observation records.
type ObsKind string

// Observation kinds. The simulator emits them in step order; each lists the
// fields it fills.
const (
	// ObsProduced: the upstream produced EventID in Stream at Pos with
	// Payload (LogStream says which cursor kind the stream uses).
	ObsProduced ObsKind = "produced"
	// ObsMembership: the registry appended "Bot is (Member) a member of
	// Stream for positions strictly after Pos".
	ObsMembership ObsKind = "membership"
	// ObsArrived: the upstream handed EventID to a live engine Node.
	ObsArrived ObsKind = "arrived"
	// ObsSend: Node emitted webhook request number Request to Bot for
	// EventID (Pos, Payload = body); Clock is Node's clock when it did. The
	// engine's own attempt number is deliberately not observed: attempts
	// are counted from what the bots answered (ObsWire).
	ObsSend ObsKind = "send"
	// ObsWire: request Request to Bot for EventID ended on the wire as
	// Outcome ("ok", "status" with Status, "refused", "timeout", or
	// OutcomeLost), whether or not an engine was still there to hear it.
	ObsWire ObsKind = "wire"
	// ObsLateAnswer: Bot answered request Request for EventID (Outcome
	// "ok" or "status", with Status) only after its Node had given up on
	// it (webhook-late: past the engine's request expiry). The Node was
	// told nothing of it (its ObsWire, OutcomeLost with Late, came at the
	// timeout), and whatever the runtime hands it now it must ignore: the
	// answer is no outcome the engine learned. The bot's handler ran (or
	// answered a duplicate) just before, as for any request it reads; so a
	// late 2xx did deliver the event.
	ObsLateAnswer ObsKind = "late-answer"
	// ObsKeyRotated: Bot's receiver took a new secret beside its old one
	// (and the engine nodes were handed the new one). ObsKeyRetired: it
	// dropped the old one. A request signed before the rotation and read
	// after the retirement (held on the wire that long: webhook-late) is
	// rejected through no fault of its signer.
	ObsKeyRotated ObsKind = "key-rotated"
	ObsKeyRetired ObsKind = "key-retired"
	// ObsRejected: Bot's receiver rejected request Request for EventID
	// without running the handler; Detail is its reason (signature,
	// timestamp, headers); Clock is the request's webhook-timestamp when
	// the reason is the timestamp.
	ObsRejected ObsKind = "rejected"
	// ObsHandlerFailed: Bot's handler ran for EventID and failed, so its
	// receiver forgot the id again. The claim still took a place in the
	// receiver's bounded dedup cache (and may have pushed out its oldest
	// id), so it counts toward DedupMaxEntries.
	ObsHandlerFailed ObsKind = "handler-failed"
	// ObsDuplicate: Bot's receiver verified a request for EventID and
	// answered it as a duplicate, without running the handler.
	ObsDuplicate ObsKind = "duplicate"
	// ObsForged: a forged copy of a request for EventID (a body or a
	// signature the engine did not make) reached Bot's receiver, which
	// answered Status (Detail: its reason).
	ObsForged ObsKind = "forged"
	// ObsStampProbe: a copy of a request for EventID, signed with Bot's
	// key at webhook-timestamp Stamp, was read by a twin of Bot's
	// receiver at Time; OK: it accepted it (handled, or a duplicate),
	// else it answered Status with reason Detail. The copies carry stamps
	// at the edges of the tolerance, on both sides (sim's stampProbe).
	ObsStampProbe ObsKind = "stamp-probe"
	// ObsClaimed: a Claim by Node committed and leased the rows Messages
	// (as the store returned them) to it.
	ObsClaimed ObsKind = "claimed"
	// ObsFailed: a Fail by Node on (Bot, EventID) committed and the row read
	// back from the store is Messages[0] (still live).
	ObsFailed ObsKind = "failed"
	// ObsHandled: Bot's handler ran for EventID with Payload.
	ObsHandled ObsKind = "handled"
	// ObsResult: Node was told the outcome of its request Request for
	// (Bot, EventID); OK is a 2xx; Clock is Node's clock when told.
	ObsResult ObsKind = "result"
	// ObsEnqueued: an Enqueue of Messages reached the store and committed
	// (a leased enqueue's Messages carry their LeaseOwner).
	ObsEnqueued ObsKind = "enqueued"
	// ObsAcked: an Ack of Keys committed.
	ObsAcked ObsKind = "acked"
	// ObsDead: a Fail by Node committed and the row of (Bot, EventID) read
	// back from the store, Messages[0], is dead.
	ObsDead ObsKind = "dead"
	// ObsRequeued: a dead (Bot, EventID) was made live again.
	ObsRequeued ObsKind = "requeued"
	// ObsCursor: after a cursor write by Node, the durable cursor read back
	// from the store is Cursor (Stream's kind in LogStream).
	ObsCursor ObsKind = "cursor"
	// ObsCleanup: a retention call by Node committed. Rule is "ttl" or
	// "cap"; Clock is the cleaning node's clock at the call; Cutoff and Max
	// are the arguments it passed; Deleted and Remaining are the store's
	// messages removed by the call and left after it.
	ObsCleanup ObsKind = "cleanup"
	// ObsStoreFault: a fault was injected into Node's store call Method
	// (Ambiguous: after it committed).
	ObsStoreFault ObsKind = "store-fault"
	// ObsNodeUp / ObsNodeDown: an engine node booted / crashed. NodeUp's
	// Clock is the node's clock reading at boot (its offset from virtual
	// time matters to leases another incarnation wrote).
	ObsNodeUp   ObsKind = "node-up"
	ObsNodeDown ObsKind = "node-down"
	// ObsClockJump: a running node's clock was stepped (forward or back);
	// Clock is its reading right after the step, so Clock - Time is its
	// new offset, and Jump how far it moved (negative: back). Its timers
	// keep their instants in true time.
	ObsClockJump ObsKind = "clock-jump"
	// ObsSourceState: snapshot source Stream now holds Items, watched by
	// Apps (the first one for a source, with no Items, introduces it).
	ObsSourceState ObsKind = "source-state"
	// ObsSourceFed: the snapshot worker handed live Node the current
	// state of source Stream (on a change, every scan interval, and when
	// Node became the node it feeds).
	ObsSourceFed ObsKind = "source-fed"
	// ObsCursorsRead: Node's ListCursors was answered Cursors (every
	// stored cursor), unchanged by any fault.
	ObsCursorsRead ObsKind = "cursors-read"
	// ObsQueueRead: Node's listing of the whole queue (ListMessages of
	// every subscriber) was answered Messages, unchanged by any fault, at
	// Clock by the node's clock; Keyless names the bots that had not
	// published their key then (check_bootprompt.go).
	ObsQueueRead ObsKind = "queue-read"
	// ObsCursorAsk: Node asked its store to write Cursor (a conditional
	// write, or an async one it issued now). ObsCursorTold: Node's store
	// answered a conditional write of Cursor with success, unchanged by
	// any fault: the node now knows Cursor's key is durable at or past
	// Cursor.Pos.
	ObsCursorAsk  ObsKind = "cursor-ask"
	ObsCursorTold ObsKind = "cursor-told"
	// ObsRequeueAsked: the operator asked Node to requeue the dead letter
	// (Bot, EventID).
	ObsRequeueAsked ObsKind = "requeue-asked"
	// ObsSubscribe: Node asked the upstream for Stream (LogStream: the
	// stream's real kind): a fresh sync (Fresh), or the events after Pos
	// with sync cookie Token (log streams), or those with created_at >=
	// Since ms (timestamp streams).
	ObsSubscribe ObsKind = "subscribe"
	// ObsHeal: faults stopped. ObsEnd: the run ended.
	ObsHeal ObsKind = "heal"
	ObsEnd  ObsKind = "end"
)

// OutcomeLost is the wire outcome of a request whose node will never be
// told how it ended: the connection hung (the bot never read it), or the
// bot answered and the runtime lost the answer. No ObsResult follows. To
// the engine it is a request without an answer, which it must give up on
// by itself (request expiry); the oracle counts it as a failed attempt
// where the engine may record one (dead-letter-earned), and holds the
// engine to sending the message again within its expiry bound (see
// check_prompt.go).
const OutcomeLost = "lost"

// Observation is one fact the simulator saw, in trace order. It is a union:
// each kind fills the fields its comment lists.
type Observation struct {
	Step int64
	Time time.Time
	Kind ObsKind

	Node      string
	Bot       string
	Stream    string
	LogStream bool
	EventID   string
	Pos       impl.Position
	Payload   []byte
	Member    bool
	OK        bool
	Outcome   string
	Status    int
	Ambiguous bool
	Method    string
	Detail    string

	Messages []impl.Message
	Keys     []impl.MessageKey
	Cursor   impl.Cursor
	Cursors  []impl.Cursor

	// ObsSubscribe: what the node asked the upstream for.
	Since int64
	Fresh bool
	Token []byte

	// Snapshot marks a seed-002 change notification (ObsSend, ObsHandled):
	// Stream is the source, Op the change (CREATE, UPDATE, DELETE), Item
	// and Version what it carries, Request the send it belongs to (sends
	// are numbered in the order they were made).
	Snapshot bool
	Op       string
	Item     string
	Version  string
	Request  int64
	Apps     []string
	Keyless  []string
	Items    []impl.DeliveredItem

	// Direct (ObsSend, and ObsWire with OutcomeLost): the request was sent from no row
	// its node held (neither returned by its claim nor inserted leased to
	// it by its enqueue), as the node's store answers show: the engine
	// records it on a row, as a failed attempt, when it gives up on it.
	Direct bool
	// Late (ObsWire with OutcomeLost): the request is still on the wire
	// (webhook-late); its ObsLateAnswer ends it.
	Late bool

	// Stamp (ObsHandled, ObsDuplicate, ObsStampProbe, when Stamped):
	// the webhook-timestamp of the request the receiver accepted or, for
	// a probe, was shown.
	Stamp   int64
	Stamped bool

	Rule      string
	Clock     time.Time
	Jump      time.Duration
	Cutoff    time.Time
	Max       int
	Deleted   []impl.Message
	Remaining []impl.Message
}

// CheckFinal is the store's state when the run ended.
type CheckFinal struct {
	Messages []impl.Message
	Cursors  []impl.Cursor
}

// CheckParams are the bounds the invariants are checked against. Zero
// values fall back to DefaultCheckParams' numbers where noted.
type CheckParams struct {
	// MaxAttempts is the engine's retry limit.
	MaxAttempts int `json:"max_attempts"`
	// RetentionTTL, RetentionMax and CleanupInterval are the engine's
	// retention settings; CleanupSlack is how late a cleanup may run beyond
	// two intervals before the cleaner counts as stopped.
	RetentionTTL    time.Duration `json:"retention_ttl_ns"`
	RetentionMax    int           `json:"retention_max"`
	CleanupInterval time.Duration `json:"cleanup_interval_ns"`
	CleanupSlack    time.Duration `json:"cleanup_slack_ns"`
	// ClockSkewBudget is how much longer than the TTL the engine keeps a
	// message so that a fast cleaner clock never shortens the TTL (its
	// engine.Config.ClockSkewBudget): after a TTL cleanup nothing older
	// than TTL + budget may remain.
	ClockSkewBudget time.Duration `json:"clock_skew_budget_ns"`
	// DedupWindow and DedupMaxEntries are the receivers' cache bounds: a
	// second handler run within both is an idempotent-replay violation;
	// beyond either it is counted (CheckStats.BeyondWindowDuplicates).
	DedupWindow     time.Duration `json:"dedup_window_ns"`
	DedupMaxEntries int           `json:"dedup_max_entries"`
	// ExactDedup names, per bot, the dedup its receiver uses (DedupMemory
	// or DedupDurable): those bots are held to receiver-dedup-bounds.
	ExactDedup map[string]string `json:"exact_dedup,omitempty"`
	// LivenessBound: after the heal (or the event's production, if later)
	// every obligation must resolve within this much simulated time.
	LivenessBound time.Duration `json:"liveness_bound_ns"`
	// HOLBound: a healthy bot (HealthyBots: no webhook faults, key from
	// the start) must handle each of its events within this long of the
	// event reaching an engine, plus allowances for engine downtime, leases
	// held by crashed nodes and store retries.
	HOLBound    time.Duration `json:"hol_bound_ns"`
	HealthyBots []string      `json:"healthy_bots"`
	Lease       time.Duration `json:"lease_ns"`
	StoreRetry  time.Duration `json:"store_retry_ns"`
	// WebhookTimeout bounds one attempt; it is part of the HOL allowance per
	// crash.
	WebhookTimeout time.Duration `json:"webhook_timeout_ns"`
	// ReceiverTolerance is the receivers' webhook-timestamp tolerance.
	ReceiverTolerance time.Duration `json:"receiver_tolerance_ns"`
	// The retry policy (retry-backoff): the wait after failed attempt n is
	// base(n) = min(InitialBackoff * Multiplier^(n-1), MaxBackoff), plus a
	// jitter in [0, JitterFraction * base(n)).
	InitialBackoff time.Duration `json:"initial_backoff_ns"`
	Multiplier     float64       `json:"multiplier"`
	MaxBackoff     time.Duration `json:"max_backoff_ns"`
	JitterFraction float64       `json:"jitter_fraction"`
	// The per-bot circuit breaker (breaker-policy); zero BreakerFailures
	// leaves it unjudged.
	BreakerFailures   int           `json:"breaker_failures"`
	BreakerOpenFor    time.Duration `json:"breaker_open_for_ns"`
	BreakerCloseAfter int           `json:"breaker_close_after"`
	// TimestampLookback is how far before a timestamp stream's cursor the
	// engine resumes (resume-from-cursor).
	TimestampLookback time.Duration `json:"timestamp_lookback_ns"`
	// AckDelay is how long the engine may defer the ack of a delivered
	// message (engine.Config.AckDelay; 0 = at once): acked-after-delivery
	// holds a row whose 2xx a node was told to it (check_ackprompt.go).
	AckDelay time.Duration `json:"ack_delay_ns"`
	// MaxInFlightPerBot bounds a node's unanswered requests to one bot
	// (in-flight-limit); 0 leaves it unjudged.
	MaxInFlightPerBot int `json:"max_in_flight_per_bot"`
}

// DefaultCheckParams matches engine.DefaultConfig and a receiver with a
// one-day window.
func DefaultCheckParams() CheckParams {
	return CheckParams{
		MaxAttempts:       3,
		RetentionTTL:      7 * 24 * time.Hour,
		RetentionMax:      1000,
		CleanupInterval:   5 * time.Minute,
		CleanupSlack:      time.Minute,
		DedupWindow:       24 * time.Hour,
		DedupMaxEntries:   10000,
		LivenessBound:     30 * time.Minute,
		HOLBound:          2 * time.Minute,
		Lease:             30 * time.Second,
		StoreRetry:        time.Second,
		WebhookTimeout:    2 * time.Second,
		ReceiverTolerance: 300 * time.Second,
		InitialBackoff:    time.Second,
		Multiplier:        2,
		MaxBackoff:        30 * time.Second,
		JitterFraction:    0.3,
		BreakerFailures:   5,
		BreakerOpenFor:    60 * time.Second,
		BreakerCloseAfter: 3,
		TimestampLookback: 10 * time.Minute,
		MaxInFlightPerBot: 8,
	}
}

// CheckStats are the counts a report shows beside the violations.
type CheckStats struct {
	Events                 int `json:"events"`
	Obligations            int `json:"obligations"`
	Handled                int `json:"handled"`
	DeadLettered           int `json:"dead_lettered"`
	RetentionDropped       int `json:"retention_dropped"`
	HandlerRuns            int `json:"handler_runs"`
	DuplicateHandlerRuns   int `json:"duplicate_handler_runs"`
	BeyondWindowDuplicates int `json:"beyond_window_duplicates"`
	Sends                  int `json:"sends"`
	Cleanups               int `json:"cleanups"`
	CursorObservations     int `json:"cursor_observations"`
	// MaxResolveAfterHeal is the slowest obligation's resolution measured
	// from max(heal, production): how close the run came to LivenessBound.
	MaxResolveAfterHeal time.Duration `json:"max_resolve_after_heal_ns"`
	// MaxHealthyLatency is the slowest healthy-bot delivery after its
	// allowances: how close the run came to HOLBound.
	MaxHealthyLatency time.Duration `json:"max_healthy_latency_ns"`
	// SnapshotChanges counts seed-002 change notifications handled by apps.
	SnapshotChanges int `json:"snapshot_changes"`
	// LateRejections counts timestamp rejections of requests the network
	// delivered late (signed in time; not a violation).
	LateRejections int `json:"late_rejections"`
}

// CheckReport is Check's full answer.
type CheckReport struct {
	Violations []Violation
	Stats      CheckStats
}
