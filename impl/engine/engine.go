package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Engine is the reference delivery engine. It is not safe for concurrent
// use: a runtime owns it and feeds it one input at a time.
type Engine struct {
	cfg   Config
	store impl.Store
	ctx   context.Context
	// leaser is the store's leased enqueue when new messages may be sent
	// without a claim (leaserOf), else nil. It depends on the store alone.
	leaser impl.LeasingEnqueuer
	// direct: new messages go out by HandOffDirect (needs leaser).
	direct bool
	// writer, when set (writerOf), takes acks and sync cursor writes
	// deferred (Config.AckDelay) together with the next leased enqueue.
	writer   impl.HandOffWriter
	deferred deferredWrites
	sigs     sigArena // where Send signatures are cut from

	crashed bool
	started bool
	stepNo  uint64    // Steps so far
	membN   int       // registry entries so far (the next one's index)
	now     time.Time // the clock read once per Step, so one input sees one instant

	bots    map[string]*botState
	botIDs  []string // sorted
	streams map[string]*streamState
	strIDs  []string // sorted

	reqs  reqTable
	byKey map[impl.MessageKey]uint64 // latest request per queued message

	timers map[uint64]timerInfo
	writes map[uint64]impl.Cursor // async cursor writes awaiting CursorWriteDone

	nextReq, nextTimer, nextWrite uint64

	// Store work that failed and waits for the store-retry timer.
	retryArmed    bool
	startPending  bool
	resumePending bool
	pendingOps    map[impl.MessageKey]pendingOp

	snaps map[snapKey]*snapState
	// unsaved: sources whose latest SourceState this node was handed but
	// has not yet written to the store (see saveSourceState).
	unsaved map[string][]impl.DeliveredItem

	out Ready
	cnt Counters

	// Reused per batch so that replaying a large backlog does not allocate
	// per event.
	evBuf     []Event
	msgBuf    []impl.Message
	gotBuf    []bool
	budgetBuf []int

	// WebhookResults' batch of acknowledgements, reused likewise.
	ackKeys  []impl.MessageKey
	ackReqs  []request
	touchGen uint64

	// Streams whose oldest direct hold was released during this Step; the
	// end of Step moves their cursors (one store call for all of them).
	holdsFreed []*streamState
	dirBuf     []directSend
	botAtBuf   []*botState // handOff's bots of the stream, by index
}

// request is one outstanding webhook request. Replay keeps a batch of
// them in the request table (reqtable.go, an id-ordered ring), so it stays
// small: the bot is key.Subscriber, and the
// seed-002 part lives behind a pointer.
type request struct {
	key     impl.MessageKey // Subscriber is the bot (for a snapshot, the app)
	stream  string
	pos     impl.Position
	attempt int
	sentAt  time.Time
	snap    *snapReq // non-nil for a seed-002 change notification

	// A HandOffDirect send has no queue row: body is kept to write one if
	// it fails, and hold is the stream hold it keeps the cursor behind (0
	// under the CursorBeforeDirectAnswer bug, which keeps none).
	direct bool
	hold   uint64
	held   *streamState // the stream of hold, when hold is not 0
	body   []byte
	// dead: a direct send of the same message was answered a permanent
	// status while this request held its row (runOp, opRecord), so this
	// request's failure must dead-letter the row rather than retry it.
	dead bool
	// bot is the bot's state when the request was sent by sendMessage or
	// sendDirect (nil otherwise), so that settling it needs no lookup of
	// key.Subscriber; bots are never removed from Engine.bots.
	bot *botState
}

type snapReq struct {
	key    snapKey
	change Change
	// unsure: the item's attempted entry said, when this was sent, that
	// the app may hold something else than its delivered record; a 2xx
	// makes it certain again (the entry is removed).
	unsure bool
}

type timerKind uint8

const (
	timerWake timerKind = iota + 1
	timerBreaker
	timerMaint
	timerStoreRetry
	timerSnap
	timerFlush
)

type timerInfo struct {
	kind timerKind
	bot  string
	snap snapKey
	at   time.Time
}

type opKind uint8

const (
	opAck opKind = iota + 1
	opFail
	opRequeue
	opDrop   // the NoRequeueOnFailure bug's ack of a failed message
	opRecord // write the row of a failed direct send, then fail it (opFail)
)

type pendingOp struct {
	kind    opKind
	next    time.Time
	reason  string
	attempt int
	dead    bool   // opFail, opRecord: a permanent status (impl.PermanentStatus): dead now
	stream  string // for notes
	pos     impl.Position

	// opRecord: the row to write and the hold it releases once written.
	msg  *impl.Message
	hold uint64
}

func newEngine(cfg Config, store impl.Store) *Engine {
	e := &Engine{cfg: cfg, store: store, ctx: context.Background(), leaser: leaserOf(store)}
	e.direct = e.leaser != nil && (cfg.HandOff == HandOffDirect || cfg.Bugs.CursorBeforeDirectAnswer)
	e.writer = writerOf(cfg, e.leaser, e.direct, store)
	e.reset()
	return e
}

// reset forgets everything held in memory, as a restarted process would.
func (e *Engine) reset() {
	e.started = false
	e.membN = 0
	e.bots = map[string]*botState{}
	e.botIDs = nil
	e.streams = map[string]*streamState{}
	e.strIDs = nil
	e.reqs = reqTable{}
	e.byKey = map[impl.MessageKey]uint64{}
	e.timers = map[uint64]timerInfo{}
	e.writes = map[uint64]impl.Cursor{}
	e.retryArmed = false
	e.startPending = false
	e.resumePending = false
	e.pendingOps = map[impl.MessageKey]pendingOp{}
	e.snaps = map[snapKey]*snapState{}
	e.unsaved = map[string][]impl.DeliveredItem{}
	e.holdsFreed = nil
	e.deferred = deferredWrites{}
}

// Step feeds one input to the engine. It returns ErrCrashed when the
// CrashHook chose a crash point (the engine is then dead and its pending
// effects are discarded, as a killed process's would be). Store errors are
// not returned: they are counted, noted and retried on a timer.
func (e *Engine) Step(in Input) error {
	if e.crashed {
		return ErrCrashed
	}
	if _, isStart := in.(Start); !isStart && !e.started {
		return fmt.Errorf("engine: got %T before Start; feed Start{Registry} first", in)
	}
	e.now = e.cfg.Clock.Now()
	e.stepNo++
	switch v := in.(type) {
	case Start:
		e.start(v.Registry)
	case UpstreamBatch:
		e.onBatch(v)
	case WebhookResult:
		e.onResult(v)
	case WebhookResults:
		e.onResults(v.Results)
	case TimerFired:
		e.onTimer(v.TimerID)
	case KeyPublished:
		e.onKeyPublished(v.Bot)
	case MembershipChanged:
		e.onMembership(v.Membership)
	case BotAdded:
		e.onBotAdded(v.Bot)
	case CursorWriteDone:
		e.onCursorWriteDone(v)
	case RequeueDead:
		e.onRequeue(v.Key)
	case SourceState:
		e.onSourceState(v)
	default:
		return fmt.Errorf("engine: unknown input type %T; pass one of the value types in api.go", in)
	}
	if !e.crashed && len(e.holdsFreed) > 0 {
		e.moveHeldCursors()
	}
	if e.crashed {
		e.out = Ready{}
		return ErrCrashed
	}
	return nil
}

// Ready returns the effects accumulated since the last call, in the order
// the engine produced them.
func (e *Engine) Ready() Ready {
	r := e.out
	e.out = Ready{}
	return r
}

// Recycle hands back a Ready that the runtime has completely finished with
// (it keeps no reference to its slices or their elements), so that later
// effects reuse the memory instead of allocating it again. It is optional:
// a replay produces a Send and a Note per delivery, and reusing their
// slices removes a large share of its allocations. Never recycle a Ready
// whose slices are still in use.
func (e *Engine) Recycle(r Ready) {
	e.out.Subscribes = reuse(e.out.Subscribes, r.Subscribes)
	e.out.Sends = reuse(e.out.Sends, r.Sends)
	e.out.Timers = reuse(e.out.Timers, r.Timers)
	e.out.CursorWrites = reuse(e.out.CursorWrites, r.CursorWrites)
	e.out.Notes = reuse(e.out.Notes, r.Notes)
}

// reuse returns old's empty cap-full replacement: spare, cleared, if old
// holds nothing and spare has more room.
func reuse[T any](old, spare []T) []T {
	if len(old) > 0 || cap(spare) <= cap(old) {
		return old
	}
	clear(spare)
	return spare[:0]
}

// Counters returns the running totals.
func (e *Engine) Counters() Counters { return e.cnt }

// SwitchBugs replaces the known-bug switches for every later step: the
// simulator's cause analysis continues a variant's run as the reference
// engine (sim.Redraw.Reference), so that a bug's later actions are re-drawn
// like the world's randomness. What a switch already did stays done
// (state it left, and the hand-off mode New chose).
func (e *Engine) SwitchBugs(b Bugs) { e.cfg.Bugs = b }

// crashAt asks the hook; a true answer kills the engine.
func (e *Engine) crashAt(p CrashPoint) bool {
	if e.cfg.CrashHook != nil && e.cfg.CrashHook(p) {
		e.crashed = true
	}
	return e.crashed
}

func (e *Engine) note(n Note) { e.out.Notes = append(e.out.Notes, n) }

func (e *Engine) storeErr(op string, err error) {
	e.cnt.StoreErrors++
	e.note(Note{Kind: "store-error", Detail: op + ": " + err.Error()})
}

// retryLater is storeErr for work that the caller leaves behind for the
// store-retry timer.
func (e *Engine) retryLater(op string, err error) {
	e.storeErr(op, err)
	e.armRetry()
}

func (e *Engine) setTimer(t timerInfo) uint64 {
	e.nextTimer++
	id := e.nextTimer
	e.timers[id] = t
	e.out.Timers = append(e.out.Timers, Timer{ID: id, At: t.at})
	return id
}

// armRetry makes sure the store-retry timer is set; every failed store
// operation leaves its work behind and calls this.
func (e *Engine) armRetry() {
	if e.retryArmed {
		return
	}
	e.retryArmed = true
	e.setTimer(timerInfo{kind: timerStoreRetry, at: e.now.Add(e.cfg.StoreRetry)})
}

func (e *Engine) jitter() float64 {
	if e.cfg.JitterFraction == 0 {
		return 0
	}
	return e.cfg.Rand.Float64()
}

func (e *Engine) start(reg Registry) {
	e.reset()
	for _, b := range reg.Bots {
		e.upsertBot(b)
	}
	for _, m := range reg.Memberships {
		e.addMembership(m)
	}
	e.started = true
	e.setTimer(timerInfo{kind: timerMaint, at: e.now.Add(e.cfg.CleanupInterval)})
	e.boot()
	if e.crashed {
		return
	}
	e.resumeQueue()
}

func (e *Engine) onTimer(id uint64) {
	t, ok := e.timers[id]
	if !ok {
		return
	}
	delete(e.timers, id)
	switch t.kind {
	case timerWake:
		e.onWake(id, t)
	case timerBreaker:
		e.onBreakerTimer(id, t)
	case timerMaint:
		e.onMaint()
	case timerStoreRetry:
		e.onStoreRetry()
	case timerSnap:
		e.onSnapTimer(id, t)
	case timerFlush:
		e.onFlushTimer()
	}
}

func (e *Engine) onStoreRetry() {
	e.retryArmed = false
	if e.startPending {
		e.boot()
		if e.crashed {
			return
		}
	}
	if e.resumePending {
		e.resumeQueue()
		if e.crashed {
			return
		}
	}
	if len(e.pendingOps) > 0 {
		keys := make([]impl.MessageKey, 0, len(e.pendingOps))
		for k := range e.pendingOps {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
		for _, k := range keys {
			errs := e.cnt.StoreErrors
			e.runPending(k)
			if e.crashed {
				// A pending op's pump reached a crash point: the node
				// stops there, with no further store call.
				return
			}
			if e.cnt.StoreErrors != errs {
				// The store is still failing: the rest wait for the next
				// retry rather than each costing a failed call per retry
				// for as long as the outage lasts (store errors are not
				// about one message, so no key starves: one that fails is
				// retried first next time, and leaves once it succeeds).
				break
			}
		}
	}
	e.advanceJoins(nil)
	if e.crashed {
		return
	}
	var dirty []*streamState
	for _, id := range e.strIDs {
		s := e.streams[id]
		if len(s.pending) > 0 {
			e.processEvents(s, nil, s.pendingCookie)
			if e.crashed {
				return
			}
		} else if s.cursorDirty {
			dirty = append(dirty, s)
		}
	}
	if len(dirty) > 0 {
		e.retryCursors(dirty)
	}
}

// onMaint is the periodic housekeeping: the seed-003 retention cleaner, and
// a sweep that re-pumps every bot so that nothing can stay parked forever
// (leases left by a dead node, requests whose result never came back).
func (e *Engine) onMaint() {
	if !e.cfg.Bugs.NoRetention {
		e.runRetention()
	}
	e.expireRequests()
	e.pruneSeen()
	e.advanceJoins(nil)
	for _, id := range e.botIDs {
		e.pump(e.bots[id])
		if e.crashed {
			return
		}
	}
	e.setTimer(timerInfo{kind: timerMaint, at: e.now.Add(e.cfg.CleanupInterval)})
}

func (e *Engine) runRetention() {
	budget, leaseNow := e.cfg.ClockSkewBudget, e.now
	if e.cfg.Bugs.NoClockSkewBudget {
		budget = 0
	}
	if e.cfg.Bugs.RetentionIgnoresLease {
		leaseNow = e.now.Add(100 * 365 * 24 * time.Hour) // no lease is active that late
	}
	cutoff := e.now.Add(-e.cfg.RetentionTTL - budget)
	n, err := e.store.DeleteExpired(e.ctx, cutoff, leaseNow)
	if err != nil {
		e.storeErr("delete-expired", err)
	} else {
		e.cnt.RetentionTTL += n
		e.note(Note{Kind: "retention-ttl", Count: n, Detail: "cutoff=" + cutoff.UTC().Format(time.RFC3339Nano)})
	}
	if e.cfg.Bugs.TrimKeepsOldest {
		n, err = e.trimNewest()
	} else {
		n, err = e.store.TrimPerSubscriber(e.ctx, e.cfg.RetentionMax, leaseNow)
	}
	if err != nil {
		e.storeErr("trim-per-subscriber", err)
	} else {
		e.cnt.RetentionCap += n
		e.note(Note{Kind: "retention-cap", Count: n, Detail: fmt.Sprintf("max=%d", e.cfg.RetentionMax)})
	}
}

// expireRequests forgets requests older than a lease: their result is not
// coming (the runtime lost it), and the store lease has lapsed anyway, so
// the message is claimable again.
func (e *Engine) expireRequests() {
	var stale []uint64
	for _, id := range e.reqs.ids() {
		if r, _ := e.reqs.get(id); !r.sentAt.Add(e.cfg.Lease).After(e.now) {
			stale = append(stale, id)
		}
	}
	for _, id := range stale {
		r, _ := e.reqs.take(id)
		if r.snap != nil {
			if st := e.snaps[r.snap.key]; st != nil && st.reqID == id {
				st.reqID = 0
				e.snapAdvance(st)
			}
			continue
		}
		if r.direct {
			// No row holds it: write one now, due at once (the answer is
			// long overdue), counting the attempt so the retry bound stays
			// exact.
			e.release(id, &r)
			e.recordDirect(r, e.now, "no answer within the lease", false)
			if e.crashed {
				return
			}
			continue
		}
		e.release(id, &r).backlog = true // the lapsed lease makes the message claimable again
	}
}

func keyLess(a, b impl.MessageKey) bool {
	if a.Subscriber != b.Subscriber {
		return a.Subscriber < b.Subscriber
	}
	return a.EventID < b.EventID
}

// insertSorted adds s to the sorted slice ids unless present.
func insertSorted(ids []string, s string) []string {
	i, found := slices.BinarySearch(ids, s)
	if found {
		return ids
	}
	return slices.Insert(ids, i, s)
}

// trimNewest is the TrimKeepsOldest bug: the cap is enforced by deleting
// each bot's newest messages beyond it, so the oldest (maybe already
// expired) stay and the fresh ones are lost.
func (e *Engine) trimNewest() (int, error) {
	msgs, err := e.store.ListMessages(e.ctx, "")
	if err != nil {
		return 0, err
	}
	var keys []impl.MessageKey
	for i := 0; i < len(msgs); {
		j := i
		for j < len(msgs) && msgs[j].Subscriber == msgs[i].Subscriber {
			j++
		}
		if j-i > e.cfg.RetentionMax {
			for _, m := range msgs[i+e.cfg.RetentionMax : j] {
				keys = append(keys, m.Key())
			}
		}
		i = j
	}
	if len(keys) == 0 {
		return 0, nil
	}
	return e.store.Ack(e.ctx, keys)
}
