package oracle

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Check evaluates every delivery invariant over one run: the observations in
// trace order, the store's final state, and the bounds in p. It is pure and
// deterministic: the same input gives the same violations in the same order.
func Check(obs []Observation, final CheckFinal, p CheckParams) []Violation {
	return CheckDetailed(obs, final, p).Violations
}

// CheckDetailed is Check plus the counts a report shows.
func CheckDetailed(obs []Observation, final CheckFinal, p CheckParams) CheckReport {
	c := NewChecker(p)
	for i := range obs {
		c.Observe(&obs[i])
	}
	return c.Finish(final)
}

// Checker is CheckDetailed fed one observation at a time, so that a long
// run need not keep its observations (nor the queue listings they carry)
// until the end. The checker keeps no reference to an Observation.
type Checker struct{ c *checker }

// NewChecker starts a check against the bounds in p.
func NewChecker(p CheckParams) *Checker { return &Checker{newChecker(p)} }

// BreakerOpens is how many times, in node's current incarnation, the
// observations so far make it certain that one of its breakers opened
// (breaker-policy's own account: BreakerFailures consecutive failures it
// was told of while closed, or a failure told while half-open). An engine
// that reports its breaker openings (engine.Counters.BreakerOpened) reports
// at least this many. It may be read after Finish.
func (k *Checker) BreakerOpens(node string) int { return k.c.brOpens[node] }

// Observe takes the next observation, in trace order.
func (k *Checker) Observe(o *Observation) { k.c.observe(o) }

// Finish runs the end-of-run checks against the store's final state and
// returns the report; the Checker is spent afterwards.
func (k *Checker) Finish(final CheckFinal) CheckReport {
	c := k.c
	c.finish(final)
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Step < c.out[j].Step })
	return CheckReport{Violations: c.out, Stats: c.stats}
}

// chkKey names a (bot, event) pair — or a (bot, stream) pair where a check
// keys by stream. It is interned (checker.key): one *chkPair per distinct
// pair per run, so the many maps keyed by it hash and compare a pointer
// instead of two strings. Equal pairs are the same pointer; a chkKey is
// never nil.
type chkKey = *chkPair

type chkPair struct {
	bot, event string
	chkState
}

type chkPairName struct{ bot, event string }

// chkState is what the checks keep per (bot, event): one field each
// instead of one map each, so an observation's checks read and write them
// without a lookup. A has* flag says whether the value beside it is set
// (a map entry, before): a cleared one is set back to its zero value.
type chkState struct {
	handled        time.Time // first handler run
	hasHandled     bool
	lastHandled    chkHandled
	hasLastHandled bool
	// durable dedup: the failed claim that marked the id, before its
	// handled run
	markedAt    time.Time
	hasMarkedAt bool
	handoff     bool
	// acked-after-delivery: the first 2xx an engine was told since the
	// row's last enqueue or requeue
	okSinceRow    time.Time
	hasOkSinceRow bool
	deadAt        time.Time
	isDead        bool
	dropped       time.Time
	hasDropped    bool
	drops         []time.Time // every retention drop, in order
	requeues      int
	// (bot, stream) keys: the bot joined after the stream's first event
	joinedLate bool
	life       *chkLife     // bounded-retry's current lifetime (check_wire.go)
	wire       []chkWireReq // lease-exclusive: requests from a lease still on the wire (check_lease.go)
	rowReq     int64        // acked-after-delivery: chkAckPrompt's rowReq
	hasRowReq  bool
	nodes      []chkNodeKey // the interned (node, this pair) keys (checker.nk)
}

// key is the interned chkKey of (bot, event). The checks of one
// observation ask for the same pair again and again: the last key answers
// those without a lookup.
func (c *checker) key(bot, event string) chkKey {
	if l := c.lastKey; l != nil && l.event == event && l.bot == bot {
		return l
	}
	p := chkPairName{bot, event}
	k, ok := c.keys[p]
	if !ok {
		if len(c.keySlab) == cap(c.keySlab) {
			// Full slabs stay where they are; a run's first slabs are
			// small (most runs have few pairs).
			c.keySlab = make([]chkPair, 0, min(256, 16<<min(c.keySlabs, 4)))
			c.keySlabs++
		}
		c.keySlab = append(c.keySlab, chkPair{bot: bot, event: event})
		k = &c.keySlab[len(c.keySlab)-1]
		c.keys[p] = k
	}
	c.lastKey = k
	return k
}

type chkEvent struct {
	id, stream   string
	log          bool
	pos          impl.Position
	payload      []byte
	producedAt   time.Time
	step         int64
	arrived      bool
	firstArrival time.Time
	arrivals     int
	// freshAt lists, in order, the arrivals at a node that had not been
	// handed the event in its current incarnation: those an engine must
	// act on. A copy re-delivered after retention dropped it is timed from
	// the first of them after the drop; a repeat to a node that already
	// had the event may be ignored (it was handed off before).
	freshAt []time.Time
}

type chkMemb struct {
	bot    string
	from   impl.Position
	member bool
	step   int64 // the registry change's observation step
	// A join that starts behind what the nodes had received when it was
	// registered (at) owes the bot events up to reached, the furthest
	// position that had reached any node then (hasReached): see backfilled.
	at         time.Time
	reached    impl.Position
	hasReached bool
}

type chkHandled struct {
	at  time.Time
	seq int // the bot's handler-run count when this run happened
}

type chkNode struct {
	up          bool
	booted      bool
	upAt        time.Time
	downSince   time.Time
	lastCleanup time.Time
	flagged     bool // cadence already reported for this boot
	downs       int  // crashes so far: tells a request's incarnation from later ones
	// back: how far this incarnation's clock was stepped back in all
	// (check_clockjump.go).
	back time.Duration
}

type chkInterval struct{ from, to time.Time }

type chkCost struct {
	at   time.Time
	cost time.Duration
}

type checker struct {
	p     CheckParams
	out   []Violation
	stats CheckStats

	keys         map[chkPairName]chkKey // the interned keys (key)
	keySlabs     int                    // how many slabs key has allocated
	lastKey      chkKey                 // the last key returned
	keySlab      []chkPair              // where new keys are allocated, 256 at a time
	nodeRefs     chkNames               // the interned node names (nref)
	botRefs      chkNames               // the interned bot names (nb)
	events       map[string]*chkEvent
	streamEvents map[string][]*chkEvent // production order
	memb         map[string][]chkMemb
	reached      map[string]impl.Position // per stream, the furthest event that reached a node
	bots         []string                 // sorted, every bot seen in a membership
	botSet       map[string]bool

	// What the checks keep per (bot, event) is in its key (chkState).
	botRuns map[string]int
	stored  map[chkKey]time.Time // in the queue now, and since when (virtual time of the inserting Enqueue)

	cursorLast    map[impl.CursorKey]impl.Position
	cursorChecked map[impl.CursorKey]int

	reported map[string]bool
	jitter   jitterState

	nodes     map[string]*chkNode
	nodeNames []string
	nodeList  []*chkNode // nodes[nodeNames[i]], for the per-observation cadence scan
	// cadenceDue is when checkCleanupCadence can next flag a node (the
	// earliest lastCleanup + limit of the nodes up and not flagged;
	// cadenceNone: no such node); cadenceDirty says a node's up,
	// lastCleanup or flagged changed since it was computed.
	cadenceDue   time.Time
	cadenceNone  bool
	cadenceDirty bool
	ambiguous    int
	down         []chkInterval // per-node downtime, closed at end
	crashes      []time.Time
	storeFault   []chkCost // when each injected store fault happened, and what it may cost a delivery

	// The spread of node clock offsets seen at boots: a lease written by
	// one clock and read by another lasts that much longer or shorter.
	minOffset, maxOffset time.Duration
	anyOffset            bool

	snap *snapChecker
	// resume-from-cursor (check_resume.go): per node, its last cursor read.
	resume map[string]*resumeState
	// cursor-monotonic: per node, what its store has told it each cursor
	// is durable at or past (check_cursor.go cursorAsk).
	known map[string]map[impl.CursorKey]impl.Position
	// retry-backoff's upper side (check_prompt.go).
	prompt   chkPrompt
	boot     chkBootPrompt
	leases   chkLeases
	ackp     chkAckPrompt
	inflight chkInflight
	// idempotent-replay across a crash (check_replay.go)
	bootRead map[string]chkBootRead
	// seed 002's delivery timing (check_snapprompt.go).
	sprompt snapPrompt
	// idempotent-replay's durable half (check_replay.go).
	handedBy    map[chkNodeKey]chkHanded
	tsHanded    map[chkNodeStream]chkTSHigh
	membChanged map[string]time.Time
	// lateJoin: the joins (memb entries) each check has already let
	// excuse a node's hand-off of a message (check_replay.go
	// lateJoinExcuse).
	lateJoin map[chkLateKey]chkLateUse
	// What the checks keep per request (rq): sentAt, toldAt, life, inc,
	// no, direct (sent with no queue row), open (resend-with-cause).
	reqs     map[int64]*chkReq
	reqSlab  []chkReq // where new ones are allocated
	lastRq   *chkReq  // the last one rq returned, for lastRqID
	lastRqID int64
	// directAt, lastReq, openDirect, directFailed: per node and message,
	// in its key (chkNodeState).
	resend chkResend           // resend-with-cause (check_resend.go)
	rx     map[string]*rxModel // receiver-dedup-bounds, per bot
	wireState

	// breaker-policy (check_breaker.go): per node and bot (each node's
	// outstanding requests per message: chkNodeState.brOut).
	breakers map[chkNodeBot]*chkBreaker
	brLost   map[int64]time.Time // requests never to be answered: the sender's clock at the send
	// brOpens: per node, the openings of its breakers in its current
	// incarnation that the observations make certain (reported-counters'
	// lower bound on breaker_opened, read by the simulator: BreakerOpens).
	brOpens map[string]int

	now    time.Time
	step   int64
	healed bool
	healAt time.Time
	endAt  time.Time
}

func newChecker(p CheckParams) *checker {
	d := DefaultCheckParams()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.CleanupSlack <= 0 {
		p.CleanupSlack = d.CleanupSlack
	}
	if p.LivenessBound <= 0 {
		p.LivenessBound = d.LivenessBound
	}
	if p.HOLBound <= 0 {
		p.HOLBound = d.HOLBound
	}
	if p.ReceiverTolerance <= 0 {
		p.ReceiverTolerance = d.ReceiverTolerance
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff, p.Multiplier, p.MaxBackoff, p.JitterFraction = d.InitialBackoff, d.Multiplier, d.MaxBackoff, d.JitterFraction
	}
	return &checker{
		p:             p,
		keys:          map[chkPairName]chkKey{},
		events:        map[string]*chkEvent{},
		streamEvents:  map[string][]*chkEvent{},
		memb:          map[string][]chkMemb{},
		reached:       map[string]impl.Position{},
		botSet:        map[string]bool{},
		breakers:      map[chkNodeBot]*chkBreaker{},
		brOpens:       map[string]int{},
		brLost:        map[int64]time.Time{},
		botRuns:       map[string]int{},
		stored:        map[chkKey]time.Time{},
		cursorLast:    map[impl.CursorKey]impl.Position{},
		cursorChecked: map[impl.CursorKey]int{},
		reported:      map[string]bool{},
		nodes:         map[string]*chkNode{},
		snap:          newSnapChecker(),
		sprompt:       newSnapPrompt(),
		handedBy:      map[chkNodeKey]chkHanded{},
		tsHanded:      map[chkNodeStream]chkTSHigh{},
		membChanged:   map[string]time.Time{},
		lateJoin:      map[chkLateKey]chkLateUse{},
		reqs:          map[int64]*chkReq{},
		resend:        newChkResend(),
		known:         map[string]map[impl.CursorKey]impl.Position{},
		ackp:          newAckPrompt(),
		inflight:      newInflight(),
		bootRead:      map[string]chkBootRead{},
		leases:        newLeases(),
		boot:          chkBootPrompt{waiting: map[chkKey]*chkBootWait{}, read: map[string]int{}},
		prompt:        chkPrompt{waiting: map[chkKey]time.Time{}, asked: map[chkKey]time.Time{}, fails: map[string][]time.Time{}, breakerAt: map[string]time.Time{}, fullAt: map[string]time.Time{}},
		wireState: wireState{
			ambiguousFail: map[chkNodeKey]int{},
			lastFail:      map[string]chkKey{},
			lastArrival:   map[chkNodeEvent]chkArrival{},
			permTold:      map[chkNodeKey]chkPermTold{},
			snapFails:     map[chkKey]int{},
			storeFaultAt:  map[string]time.Time{},
			lostPend:      map[chkNodeKey][]int64{},
			lostRowless:   map[chkNodeKey][]int64{},
			cursorReached: map[string]time.Time{},
			streamMax:     map[string]impl.Position{},
		},
	}
}

// report records a violation at the current step. once, if non-empty,
// suppresses repeats of the same (invariant, once) pair: one broken
// obligation is one violation, however many steps re-break it.
func (c *checker) report(inv, bot, event, once, format string, args ...any) {
	if once != "" {
		k := inv + "\x00" + once
		if c.reported[k] {
			return
		}
		c.reported[k] = true
	}
	c.out = append(c.out, Violation{
		Invariant: inv, Bot: bot, Event: event, Time: c.now, Step: c.step,
		Detail: fmt.Sprintf(format, args...),
	})
}

func chkOnce(bot, event string) string { return bot + "\x00" + event }

// memberAt decides whether bot is owed the event at pos in stream: the last
// registry entry (in registry order) for that bot whose From is strictly
// before pos wins; with no such entry the bot is not a member.
func (c *checker) memberAt(stream, bot string, pos impl.Position) bool {
	member := false
	for _, m := range c.memb[stream] {
		if m.bot == bot && m.from.Compare(pos) < 0 {
			member = m.member
		}
	}
	return member
}

// backfilled says whether bot's obligation for the event at pos in stream
// was created by a join registered after the event had reached a node (a
// membership that starts behind the stream's head), and when that join was
// registered. Until then no engine could owe the bot the event: a cursor
// may have passed it legitimately (cursor-low-watermark), and its delivery
// is timed from the join (no-head-of-line-blocking). Its delivery is still
// owed (no-silent-loss, liveness).
func (c *checker) backfilled(stream, bot string, pos impl.Position) (time.Time, bool) {
	// The entry that made the bot a member at pos for good: the last one
	// that turned its membership there from false to true.
	member, start := false, -1
	ms := c.memb[stream]
	for i, m := range ms {
		if m.bot != bot || m.from.Compare(pos) >= 0 || m.member == member {
			continue
		}
		member = m.member
		if member {
			start = i
		}
	}
	if !member {
		return time.Time{}, false
	}
	m := ms[start]
	if !m.hasReached || pos.Compare(m.reached) > 0 {
		return time.Time{}, false
	}
	return m.at, true
}

func (c *checker) observe(o *Observation) {
	c.now, c.step = o.Time, o.Step
	c.permanentDue(o.Step)
	c.resendObserve(o)
	c.checkCleanupCadence()
	c.promptDue(o.Time)
	c.bootDue(o.Time)
	c.ackDue(o.Time)
	c.snapDue(o.Time)
	switch o.Kind {
	case ObsProduced:
		c.produced(o)
	case ObsMembership:
		m := chkMemb{bot: o.Bot, from: o.Pos, member: o.Member, step: o.Step, at: o.Time}
		m.reached, m.hasReached = c.reached[o.Stream]
		c.memb[o.Stream] = append(c.memb[o.Stream], m)
		c.membChanged[o.Stream] = o.Time
		c.replayMembership(o)
		if !c.botSet[o.Bot] {
			c.botSet[o.Bot] = true
			c.bots = append(c.bots, o.Bot)
			sort.Strings(c.bots)
		}
	case ObsArrived:
		ne := chkNodeEvent{o.Node, o.EventID}
		downs := c.node(o.Node).downs
		prev, seen := c.lastArrival[ne]
		c.lastArrival[ne] = chkArrival{o.Time, downs}
		if e := c.events[o.EventID]; e != nil {
			if r, ok := c.reached[e.stream]; !ok || e.pos.Compare(r) > 0 {
				c.reached[e.stream] = e.pos
			}
			if !e.arrived {
				e.arrived, e.firstArrival = true, o.Time
			}
			e.arrivals++
			if !seen || prev.downs != downs {
				e.freshAt = append(e.freshAt, o.Time)
			}
		}
	case ObsSend:
		r := c.rq(o.Request)
		r.sentAt, r.hasSentAt = o.Time, true
		if o.Snapshot {
			c.snapSend(o)
			c.snapPromptSend(o)
		} else {
			k := c.key(o.Bot, o.EventID)
			c.promptResolved(k)
			delete(c.boot.waiting, k)
			c.leaseSend(o, k)
			c.ackSent(o)
			c.inflightSend(o)
			if !c.isStored(k) {
				c.replayed(o.Node, k, "a request with no queue row")
				r.direct = true
				nk := c.nk(o.Node, k)
				nk.openDirect++
				if !nk.hasDirectAt {
					nk.directAt, nk.hasDirectAt = o.Time, true
				}
			} else if nk := c.nk(o.Node, k); o.Direct && !nk.hasDirectAt {
				// A fresh arrival sent directly beside another row of
				// the message: the row its node writes for it after that
				// row is gone is as old as this send (seed 16740: a
				// give-up after the lease, written 5 minutes after the
				// send, was aged from its write by retention-bounds).
				nk.directAt, nk.hasDirectAt = o.Time, true
			}
			c.send(o)
			c.resendSend(o, k)
			c.breakerStep(o, true)
			if o.Node != "" {
				nk := c.nk(o.Node, k)
				nk.lastReq, nk.hasLastReq = o.Request, true // after the checks above read the previous one
			}
		}
	case ObsHandled:
		c.stampAccepted(o)
		c.rxClaim(o)
		if o.Snapshot {
			c.snapHandled(o)
		} else {
			c.handledRun(o)
		}
	case ObsHandlerFailed:
		c.botRuns[o.Bot]++
		// The durable dedup remembers an id from the claim that marked it
		// in the store, which a failed run makes (its release passes the
		// next request once without marking again): the window of the
		// next handled run starts here.
		if k := (c.key(o.Bot, o.EventID)); c.p.ExactDedup[o.Bot] == DedupDurable {
			if !k.hasMarkedAt {
				k.markedAt, k.hasMarkedAt = o.Time, true
			}
		}
		c.rxClaim(o)
	case ObsDuplicate:
		c.stampAccepted(o)
		c.rxClaim(o)
	case ObsStampProbe:
		c.stampProbe(o)
	case ObsForged:
		// The receiver SDK's documented answer to a signature that
		// matches no secret is 401 with that reason, without running the
		// handler (a run is judged as a handler run: its payload was
		// never produced, so no-phantom-delivery reports it).
		stale := o.Status == 400 && strings.Contains(o.Detail, "timestamp") // checked before the signature
		if !stale && (o.Status != 401 || !strings.Contains(o.Detail, "signature")) {
			c.report(InvSignedVerify, o.Bot, o.EventID, "",
				"a forged request (not signed by the engine) was answered %d (%q), not 401 for a signature that matches no secret", o.Status, o.Detail)
		}
	case ObsSourceState:
		c.snapSource(o)
	case ObsSourceFed:
		c.snapFed(o)
	case ObsResult:
		if o.OK {
			k := c.key(o.Bot, o.EventID)
			k.handoff = true
			if !o.Snapshot && c.rq(o.Request).direct {
				c.bookHandOff(o.Node, k) // a row's 2xx is booked at its enqueue
				nk := c.nk(o.Node, k)
				nk.directAt, nk.hasDirectAt = time.Time{}, false
			}
			if !k.hasOkSinceRow {
				k.okSinceRow, k.hasOkSinceRow = o.Time, true
			}
			c.ackTold(o)
		}
		if !o.Snapshot && c.rq(o.Request).direct {
			nk := c.nk(o.Node, c.key(o.Bot, o.EventID))
			if nk.openDirect > 0 {
				nk.openDirect--
			}
			if !o.OK {
				nk.directFailed, nk.hasDirectFailed = o.Step, true
			}
		}
		c.wireTold(o)
		if o.Snapshot {
			c.snapPromptResult(o)
		}
		if !o.Snapshot {
			c.inflightTold(o)
			c.resendTold(o, c.key(o.Bot, o.EventID))
			c.breakerStep(o, false)
			if !o.OK {
				c.promptFailure(o.Bot)
			}
		}
	case ObsWire:
		if o.Late {
			c.leaseHung(o) // before wireOutcome forgets its lifetime
		}
		c.wireOutcome(o)
		if !o.Snapshot && !o.Late {
			c.leaseWireEnd(o)
		}
	case ObsLateAnswer:
		c.leaseWireEnd(o)
	case ObsKeyRotated, ObsKeyRetired:
		c.keyChange(o)
	case ObsRejected:
		c.rejected(o)
	case ObsClaimed:
		for _, m := range o.Messages {
			c.leaseGranted(o.Node, c.key(m.Subscriber, m.EventID), o.Clock)
		}
		c.resendClaimed(o)
		c.claimed(o)
		for _, m := range o.Messages {
			c.ackHeld(c.key(m.Subscriber, m.EventID), o.Node)
		}
	case ObsFailed:
		c.failed(o)
		c.leaseFailed(o)
		for _, m := range o.Messages {
			c.ackHeld(c.key(m.Subscriber, m.EventID), "")
		}
		c.resendRecorded(c.key(o.Bot, o.EventID))
		if len(o.Messages) > 0 {
			c.promptFailed(c.key(o.Messages[0].Subscriber, o.Messages[0].EventID))
		}
	case ObsEnqueued:
		for _, m := range o.Messages {
			k := c.key(m.Subscriber, m.EventID)
			if m.LeaseOwner == o.Node && !m.LeaseUntil.IsZero() {
				c.leaseGranted(o.Node, k, m.CreatedAt) // a leased insert (if it inserted: a send follows in this step)
			}
			k.handoff = true
			if _, ok := c.stored[k]; !ok {
				if !c.recordsDirect(o.Node, k) {
					c.replayed(o.Node, k, "a new queue row")
				}
				c.bookHandOff(o.Node, k)
				c.resendInserted(o.Node, k)
				c.stored[k] = o.Time
				// A row a node writes for a message it sent with no row
				// (its failure, or no answer within a lease) carries an
				// obligation the node has held since that send: the
				// message is as old as the send.
				if nk := c.nk(o.Node, k); nk.hasDirectAt && nk.directAt.Before(o.Time) {
					c.stored[k] = nk.directAt
				}
				if m.LeaseOwner == o.Node && !m.LeaseUntil.IsZero() {
					c.lostOnNewRow(c.nk(o.Node, k))
				}
				c.ackHeld(k, m.LeaseOwner)
			}
			nk := c.nk(o.Node, k)
			nk.directAt, nk.hasDirectAt = time.Time{}, false
			k.okSinceRow, k.hasOkSinceRow = time.Time{}, false
		}
	case ObsAcked:
		for _, mk := range o.Keys {
			k := c.key(mk.Subscriber, mk.EventID)
			delete(c.stored, k)
			k.okSinceRow, k.hasOkSinceRow = time.Time{}, false
			c.ackLife(k)
			c.rowGone(k)
		}
	case ObsDead:
		k := c.key(o.Bot, o.EventID)
		k.handoff = true
		if !k.isDead {
			k.deadAt, k.isDead = o.Time, true
		}
		c.deadLettered(o)
		c.promptResolved(k)
		c.ackGone(k)
		c.resendRecorded(k)
	case ObsRequeued:
		k := c.key(o.Bot, o.EventID)
		k.deadAt, k.isDead = time.Time{}, false
		k.okSinceRow, k.hasOkSinceRow = time.Time{}, false
		k.requeues++
		c.endLife(k)
		c.promptRequeued(k)
		c.ackGone(k)
		c.resendRecorded(k)
		c.promptFailed(k) // live again and due now: it waits like a retry (or is excused)
	case ObsCursor:
		c.cursor(o)
		c.replayCursor(o)
	case ObsQueueRead:
		c.bootQueueRead(o)
	case ObsCursorsRead:
		c.cursorsRead(o)
		c.replayBootRead(o)
		for _, cur := range o.Cursors {
			c.cursorKnown(o.Node, cur)
		}
	case ObsCursorAsk:
		c.cursorAsk(o)
	case ObsCursorTold:
		c.cursorKnown(o.Node, o.Cursor)
	case ObsSubscribe:
		c.subscribed(o)
	case ObsRequeueAsked:
		c.promptRequeueAsked(o.Node, c.key(o.Bot, o.EventID))
	case ObsCleanup:
		c.cleanup(o)
		for _, m := range o.Deleted {
			c.rowGone(c.key(m.Subscriber, m.EventID))
		}
	case ObsStoreFault:
		if k, ok := c.lastFail[o.Node]; ok && o.Ambiguous && o.Method == "Fail" {
			// The fault layer reports an ambiguous Fail after the
			// write it wraps committed: the node's last committed Fail
			// is the one whose outcome it was not told.
			c.ambiguousFail[c.nk(o.Node, k)]++
		}
		if o.Ambiguous && o.Method == "Claim" {
			c.forgetClaims(o.Node) // committed, but the node never learned it claimed
		}
		c.storeFaultAt[o.Node] = o.Time
		c.promptExcuseAll()
		c.ackExcuseNode(o.Node)
		c.snapStoreFault()
		cost := 2 * c.p.StoreRetry
		if o.Ambiguous {
			c.ambiguous++
			if o.Method == "Claim" {
				// The claim committed: its messages sit leased to a request
				// that was never sent until the lease lapses and the engine
				// looks again (at the latest, its periodic sweep).
				cost = c.giveUpBound()
			}
		}
		c.storeFault = append(c.storeFault, chkCost{o.Time, cost})
		if o.Method == "DeleteExpired" {
			if n := c.nodes[o.Node]; n != nil {
				n.lastCleanup = o.Time
				c.cadenceDirty = true
			}
		}
	case ObsNodeUp:
		c.promptExcuseAll()
		c.ackExcuseNode(o.Node)
		c.inflightDown(o.Node)
		c.dropNodePairs(o.Node, func(p *chkNodePair) { p.lastReq, p.hasLastReq = 0, false })
		c.snapNodeUp(o)
		n := c.node(o.Node)
		if !n.up && n.booted {
			c.down = append(c.down, chkInterval{n.downSince, o.Time})
		}
		c.seeOffset(o)
		*n = chkNode{up: true, booted: true, upAt: o.Time, lastCleanup: o.Time, downs: n.downs}
		c.cadenceDirty = true
		c.breakerReset(o.Node)
	case ObsClockJump:
		c.clockJumped(o)
	case ObsNodeDown:
		delete(c.resume, o.Node) // the next incarnation reads the cursors again
		delete(c.known, o.Node)
		c.promptExcuseAll()
		c.ackExcuseNode(o.Node)
		c.inflightDown(o.Node)
		c.snapNodeDown(o.Node)
		c.forgetNode(o.Node)
		c.dropNodePairs(o.Node, func(p *chkNodePair) {
			p.directAt, p.hasDirectAt = time.Time{}, false
			p.lastReq, p.hasLastReq = 0, false
			p.openDirect = 0
		})
		c.breakerReset(o.Node)
		n := c.node(o.Node)
		n.downs++
		if n.up {
			n.up, n.downSince = false, o.Time
			c.cadenceDirty = true
			c.crashes = append(c.crashes, o.Time)
		}
	case ObsHeal:
		if !c.healed {
			c.healed, c.healAt = true, o.Time
		}
	case ObsEnd:
		c.endAt = o.Time
	}
}

// rowGone tells every check that follows a row that k's row left the
// store (a committed Ack, or a retention delete).
func (c *checker) rowGone(k chkKey) {
	c.promptRowGone(k)
	c.ackGone(k)
	c.resendRowGone(k)
	c.resendRecorded(k)
}

func (c *checker) node(name string) *chkNode {
	if len(c.nodeNames) <= 8 {
		// A handful of nodes: a scan (the names mostly share their
		// bytes with the observation's) answers without hashing.
		for i, nm := range c.nodeNames {
			if nm == name {
				return c.nodeList[i]
			}
		}
	}
	n := c.nodes[name]
	if n == nil {
		n = &chkNode{}
		c.nodes[name] = n
		c.nodeNames = append(c.nodeNames, name)
		sort.Strings(c.nodeNames)
		c.nodeList = c.nodeList[:0]
		for _, nm := range c.nodeNames {
			c.nodeList = append(c.nodeList, c.nodes[nm])
		}
	}
	return n
}

func (c *checker) produced(o *Observation) {
	if _, dup := c.events[o.EventID]; dup {
		return
	}
	e := &chkEvent{
		id: o.EventID, stream: o.Stream, log: o.LogStream, pos: o.Pos,
		payload: o.Payload, producedAt: o.Time, step: o.Step,
	}
	c.events[o.EventID] = e
	c.streamEvents[o.Stream] = append(c.streamEvents[o.Stream], e)
	c.stats.Events++
	c.progressProduced(e)
}

// send checks what an engine asked to deliver: to a member only, the
// produced payload only (no-phantom-delivery); wireSend then holds it to the
// retry limit and the retry timing (bounded-retry, retry-backoff).
func (c *checker) send(o *Observation) {
	c.stats.Sends++
	k := c.key(o.Bot, o.EventID)
	e := c.events[o.EventID]
	switch {
	case e == nil:
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"node %s sent an event that was never produced", o.Node)
		return
	case e.stream != o.Stream || e.pos.Compare(o.Pos) != 0:
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"node %s sent it as %s@%s, but it was produced as %s@%s", o.Node, o.Stream, chkPos(o.Pos), e.stream, chkPos(e.pos))
	case !c.memberAt(e.stream, o.Bot, e.pos):
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"node %s sent it to a bot that is not a member of %s at %s", o.Node, e.stream, chkPos(e.pos))
	case !bytes.Equal(e.payload, o.Payload):
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"node %s sent a body (%d bytes) that differs from the produced payload (%d bytes)", o.Node, len(o.Payload), len(e.payload))
	}

	c.wireSend(o, k)
}

// handledRun checks what a bot's handler processed: only what it is owed,
// byte for byte (no-phantom-delivery), and each event once within the
// receiver's dedup window (idempotent-replay).
func (c *checker) handledRun(o *Observation) {
	c.stats.HandlerRuns++
	k := c.key(o.Bot, o.EventID)
	e := c.events[o.EventID]
	switch {
	case e == nil:
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"the bot's handler processed an event that was never produced")
	case !c.memberAt(e.stream, o.Bot, e.pos):
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"the bot's handler processed an event of %s at %s, where it is not a member", e.stream, chkPos(e.pos))
	case !bytes.Equal(e.payload, o.Payload):
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"the bot's handler processed a payload that differs from the produced one")
	}

	if !c.duplicateRun(o, k) {
		k.handled, k.hasHandled = o.Time, true
	}
}

// duplicateRun records a handler run of k and reports whether it repeats an
// earlier one: inside the receiver's dedup window that breaks
// idempotent-replay; beyond it, it is counted.
func (c *checker) duplicateRun(o *Observation, k chkKey) bool {
	c.botRuns[o.Bot]++
	again := false
	if prev, ok := k.lastHandled, k.hasLastHandled; ok {
		again = true
		c.stats.DuplicateHandlerRuns++
		age := o.Time.Sub(prev.at)
		between := c.botRuns[o.Bot] - prev.seq - 1
		beyond := (c.p.DedupWindow > 0 && age >= c.p.DedupWindow) ||
			(c.p.DedupMaxEntries > 0 && between >= c.p.DedupMaxEntries)
		if beyond {
			c.stats.BeyondWindowDuplicates++
		} else {
			c.report(InvIdempotentReplay, o.Bot, o.EventID, "",
				"the handler ran again %s after its previous run, inside the dedup window (%s, %d entries; %d other runs since)",
				age, c.p.DedupWindow, c.p.DedupMaxEntries, between)
		}
	}
	at := o.Time
	if k.hasMarkedAt {
		at = k.markedAt
		k.markedAt, k.hasMarkedAt = time.Time{}, false
	}
	k.lastHandled, k.hasLastHandled = chkHandled{at: at, seq: c.botRuns[o.Bot]}, true
	return again
}

func chkPos(p impl.Position) string {
	if p.ID != "" {
		return fmt.Sprintf("(%d,%d,%s)", p.Major, p.Minor, p.ID)
	}
	return fmt.Sprintf("(%d,%d)", p.Major, p.Minor)
}

// nodeKeyed is a map key that names a node.
type nodeKeyed interface {
	comparable
	nodeName() string
}

func (k *chkNodePair) nodeName() string { return k.node.name }
func (k chkNodeEvent) nodeName() string { return k.node }
func (k chkNodeBot) nodeName() string   { return k.node.name }

// dropNode deletes node's entries from m (a crash or boot ends what the
// checks follow per incarnation).
func dropNode[K nodeKeyed, V any](m map[K]V, node string) {
	for k := range m {
		if k.nodeName() == node {
			delete(m, k)
		}
	}
}
