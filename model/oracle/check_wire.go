package oracle

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Issue 9: invariants judged from what the world observed, never from what
// the engine says about itself. The facts used are the requests on the wire
// and how each ended at its bot (ObsSend, ObsWire, ObsRejected), the
// results that reached a live engine node (ObsResult), and the store's
// committed state (ObsClaimed, ObsFailed/ObsDead with the row read back,
// ObsAcked, ObsRequeued, ObsCleanup, ObsCursor and the final state).
//
// A message's lifetime is the stretch of one durable attempt count: it ends
// when its row is acknowledged, deleted by retention, or requeued from the
// dead letters, and the next send starts a new one. Each send belongs to the lifetime it
// was made in.
//
//   - bounded-retry: a lifetime has at most MaxAttempts sends, plus one for
//     every send whose outcome could not be recorded because its message
//     was claimed again while the send was unsettled (no committed Ack or
//     Fail of the message followed it): a crashed node's lease lapsing, or
//     a lease taken over; plus one for every arrival of the event at an
//     engine after its first (a fresh arrival may be sent directly beside a
//     queued copy, and arrivals at two nodes race). Only what happened to this message extends its allowance; a
//     crash elsewhere in the run does not.
//   - dead-letter-earned: when the store's row of a message is dead, a
//     bot answered a send of its lifetime with a status the policy
//     dead-letters at once (impl.PermanentStatus), or the
//     bots answered at least MaxAttempts sends of its lifetime with a
//     failure (non-2xx, refused, timeout, rejected, or no answer that
//     ever reached the engine for a request sent with no queue row:
//     OutcomeLost, which the engine records as a failed attempt when it
//     gives up on it; a lost request sent from a row is no failure: the
//     engine only lets its lease lapse). A Fail that committed
//     but was reported as failed (an ambiguous store fault) may be repeated
//     by the engine and count twice; each such fault excuses one attempt.
//     A dead row the checker never saw a committed Fail make is unearned.
//   - retry-backoff: a Fail that leaves the message live sets a
//     next-attempt time at least base(n) and below base(n) *
//     (1 + JitterFraction) after the failure reached the failing node (by
//     that node's clock), where n is the attempt the failed send made as
//     the store implied it: the count of the row the node claimed for it,
//     plus one, or 1 for a send made without a claim (a fresh arrival sent
//     directly); and no send of the message is made before that time by the
//     sending node's clock, except the direct send of a fresh arrival of the
//     event at that node (also when a store fault made the node redo that
//     hand-off).
//   - bounded-retry for snapshot changes: a change's webhook-id names one
//     decision to send it and every retry of it reuses the id, so no send
//     of an id follows MaxAttempts failures answered under it.
//   - signed-requests-verify: the simulated receivers are healthy (they
//     hold the bot's secret and the simulation's true time), so every
//     rejection of a request an engine signed is a violation, except a
//     timestamp rejection of a request whose timestamp was within
//     ReceiverTolerance of the true time when it was sent (the network
//     delivered it late; counted in CheckStats.LateRejections).
//   - cursor-progress: after the heal (or the stream's last production, if
//     later), every log stream with a member bot has a durable cursor at or
//     past its last event within LivenessBound, and by the end of the run.
//
// A failed send made with no row has no committed Fail for retry-backoff and
// bounded-retry to judge; their rowless halves are in check_resend.go.

// chkLife is one lifetime of a message.
type chkLife struct {
	id        int // tells the lifetime a request was sent in from a later one
	sends     int
	unsettled int     // sends no committed Ack or Fail has accounted for yet
	open      []int64 // those sends' requests, oldest first
	excused   int     // unsettled sends a later claim superseded
	recorded  int     // committed Fails that accounted for a send
	failed    []int64 // the sends the bots answered with a failure
	repeats   int     // committed Fails excused as repeats of an ambiguous one
	// permReqs: the sends of the lifetime answered a status the policy
	// dead-letters at once (impl.PermanentStatus); one earns the dead
	// letter by itself (ackLife carries them).
	permReqs []int64
	nextAt   time.Time
	failedAt time.Time // virtual time of the Fail that set nextAt
}

// chkPermTold: a permanent status a node was told for a message
// (permanentDue).
type chkPermTold struct {
	status       int
	at           time.Time
	step         int64
	failed, dead bool // the node's last committed Fail of it in that step
}

// chkInc names a node incarnation: the node and its crash count.
type chkInc struct {
	node  string
	downs int
}

// chkReq is what the checks keep per request (checker.rq). A has* flag
// says whether the value beside it is set (a map entry, before); a cleared
// one is set back to its zero value.
type chkReq struct {
	sentAt    time.Time // the true time it left its engine
	hasSentAt bool
	toldAt    time.Time // when a live node was told its outcome
	hasToldAt bool
	life      int // the id of the lifetime it was sent in
	hasLife   bool
	inc       chkInc // the node incarnation that sent it
	hasInc    bool
	no        int  // the attempt number the store implies (0: none)
	direct    bool // sent with no queue row
	leased    bool // sent under a lease granted in its step (check_lease.go)
	// resend-with-cause: sent and not yet answered to its node, by
	// (node, message) and incarnation.
	open    chkOpenKey
	hasOpen bool
}

func (r *chkReq) dropLife() { r.life, r.hasLife = 0, false }

// rq is what the checks keep for request req (made empty on its first
// mention). One observation asks for its request again and again: the
// last one answers those without a lookup.
func (c *checker) rq(req int64) *chkReq {
	if c.lastRq != nil && c.lastRqID == req {
		return c.lastRq
	}
	r := c.reqs[req]
	if r == nil {
		if len(c.reqSlab) == cap(c.reqSlab) {
			c.reqSlab = make([]chkReq, 0, 64)
		}
		c.reqSlab = append(c.reqSlab, chkReq{})
		r = &c.reqSlab[len(c.reqSlab)-1]
		c.reqs[req] = r
	}
	c.lastRq, c.lastRqID = r, req
	return r
}

// alive: the incarnation that sent req has not crashed since. Only it can
// still record the request's outcome.
func (c *checker) alive(req int64) bool {
	r := c.rq(req)
	inc, ok := r.inc, r.hasInc
	return ok && c.node(inc.node).downs == inc.downs
}

// chkNodeKey names a (node, message) pair. Like chkKey it is interned
// (checker.nk): one *chkNodePair per distinct pair per run, so the maps
// keyed by it hash one pointer instead of a string and a pointer. Equal
// pairs are the same pointer; a chkNodeKey is never nil.
type chkNodeKey = *chkNodePair

type chkNodePair struct {
	node *chkNodeRef
	key  chkKey
	chkNodeState
}

// chkNodeState is what the checks keep per (node, message), as fields
// rather than maps (a has* flag says the value beside it is set; a cleared
// one is set back to its zero value). What a crash or a boot forgets is
// cleared through the node's list of pairs (dropNodePairs).
type chkNodeState struct {
	// directAt: the first send of the message by the node with no queue
	// row, not yet answered 2xx nor written to a row (in this
	// incarnation).
	directAt    time.Time
	hasDirectAt bool
	// lastReq: the node's newest request of the message in its current
	// incarnation (an earlier one may have been superseded in the engine:
	// breaker-policy, in-flight-limit and the ack delay read it).
	lastReq    int64
	hasLastReq bool
	// openDirect: the node's requests with no queue row not yet told an
	// outcome; directFailed: the step the node was last told such a
	// request failed (check_replay.go recordsDirect).
	openDirect      int
	directFailed    int64
	hasDirectFailed bool
	// claimedNo: the node's committed claim of the message not yet sent:
	// the row's count + 1; claimAt: its last committed claim.
	claimedNo    int
	hasClaimedNo bool
	claimAt      time.Time
	told         chkTold // the failures told to the node since its last committed Fail
	hasTold      bool
	// resend-with-cause (check_resend.go, chkResend): the node's last 2xx
	// told for the message; the 2xx of the node done with it; its last
	// failure told of a send made with no row; when a failure of it was
	// last told to the node (seq, 0: never); its requests of incarnation
	// openDowns sent and not yet answered to it (openN; those of an
	// earlier incarnation are never asked about again).
	rsOk         chkMark
	hasRsOk      bool
	rsDone       chkMark
	hasRsDone    bool
	rsRowless    chkRowless
	hasRsRowless bool
	rsFailed     int64
	rsOpenN      int
	rsOpenDowns  int
	// breaker-policy (check_breaker.go): the node's outstanding requests
	// of the message in its current incarnation, in the order sent.
	brOut []chkSent
}

// dropNodePairs applies reset to every (node, message) pair of node (a
// crash or boot ends what the checks follow per incarnation).
func (c *checker) dropNodePairs(node string, reset func(*chkNodePair)) {
	for _, p := range c.nref(node).pairs {
		reset(p)
	}
}

// chkNodeRef is a node's (or a bot's) name, interned: one per distinct
// name per run (chkNames). Unlike checker.node it records nothing about
// the node, so interning a name (even "") changes no check.
type chkNodeRef struct {
	name  string
	pairs []chkNodeKey // a node's: the (node, message) pairs interned for it (checker.nk)
}

// chkNames interns names. A run has a handful of nodes and of bots: a scan
// of the names seen so far (whose strings mostly share their bytes with
// the observation's) answers without hashing the name.
type chkNames struct {
	list   []*chkNodeRef
	byName map[string]*chkNodeRef // list by name, once it has more than 8
}

func (t *chkNames) ref(name string) *chkNodeRef {
	if len(t.list) <= 8 {
		for _, r := range t.list {
			if r.name == name {
				return r
			}
		}
	} else if r := t.byName[name]; r != nil {
		return r
	}
	r := &chkNodeRef{name: name}
	t.list = append(t.list, r)
	if len(t.list) > 8 {
		if t.byName == nil {
			t.byName = map[string]*chkNodeRef{}
			for _, x := range t.list {
				t.byName[x.name] = x
			}
		}
		t.byName[name] = r
	}
	return r
}

// nk is the interned chkNodeKey of (node, k). A message is handled by a
// handful of nodes: its key lists their pairs (chkPair.nodes), and a scan
// of them answers without hashing.
func (c *checker) nk(node string, k chkKey) chkNodeKey {
	r := c.nref(node)
	for _, p := range k.nodes {
		if p.node == r {
			return p
		}
	}
	p := &chkNodePair{node: r, key: k}
	k.nodes = append(k.nodes, p)
	r.pairs = append(r.pairs, p)
	return p
}

// nref is node's interned name.
func (c *checker) nref(node string) *chkNodeRef { return c.nodeRefs.ref(node) }

type chkNodeEvent struct{ node, event string }

// chkArrival is a node's last arrival of an event, and the node's crash
// count then (an arrival in a later incarnation is fresh to it).
type chkArrival struct {
	at    time.Time
	downs int
}

// chkTold: the failures of a message told to a node since its last
// committed Fail of it (node clock).
type chkTold struct {
	first, last time.Time
	n           int // the lowest failure number among them
}

type wireState struct {
	ambiguousFail map[chkNodeKey]int // ambiguous Fails of a message by a node not yet matched to a repeat
	lastFail      map[string]chkKey  // per node: the message of its last committed Fail
	lastArrival   map[chkNodeEvent]chkArrival
	// told, claimedNo, claimAt: per node and message, in its key
	// (chkNodeState).
	permTold      map[chkNodeKey]chkPermTold
	permPend      []chkNodeKey // permTold's keys, in the order told
	lifeSeq       int
	storeFaultAt  map[string]time.Time   // per node: its last injected store fault
	lostPend      map[chkNodeKey][]int64 // direct requests a live node will never be told of, not yet recorded by a Fail, oldest first
	lostRowless   map[chkNodeKey][]int64 // the same requests, until the node writes a new row of the message (lostOnNewRow)
	snapFails     map[chkKey]int         // failures answered per snapshot change webhook-id
	cursorReached map[string]time.Time   // stream -> when a durable cursor first reached streamMax
	keyRotated    map[string]time.Time   // per bot: its last key rotation
	keyRetired    map[string]time.Time   // per bot: its last retirement of an old key
	streamMax     map[string]impl.Position
}

// progressProduced and progressCursor keep, per stream, when a durable
// cursor first reached the highest position produced so far.
func (c *checker) progressProduced(e *chkEvent) {
	if m, ok := c.streamMax[e.stream]; !ok || e.pos.Compare(m) > 0 {
		c.streamMax[e.stream] = e.pos
		delete(c.cursorReached, e.stream)
	}
}

func (c *checker) progressCursor(stream string, pos impl.Position) {
	m, ok := c.streamMax[stream]
	if _, done := c.cursorReached[stream]; ok && !done && pos.Compare(m) >= 0 {
		c.cursorReached[stream] = c.now
	}
}

func (c *checker) life(k chkKey) *chkLife {
	l := k.life
	if l == nil {
		c.lifeSeq++
		l = &chkLife{id: c.lifeSeq}
		k.life = l
	}
	return l
}

// endLife closes k's lifetime; the next send opens a new one.
func (c *checker) endLife(k chkKey) { k.life = nil }

// ackLife closes k's lifetime when its row is deleted: a committed Ack, or
// a retention drop (seed 8960: the cap trimmed a row while a direct send
// of the message had failed and its node had not yet written the failure
// down; the node then recorded it on a new row, Attempts 1, and one more
// failure made that row dead). Another node's send of
// the message may still be unsettled with a failure already answered (a
// direct send beside the queued copy, or a result the node has not been
// handed yet): the engine records that failure on a new row (Attempts 1),
// so those failures open the next lifetime instead of vanishing with this
// one. A send a later claim superseded counts too: the claim means its
// outcome may never be recorded, not that it cannot be (seed 131867: a
// direct send's failure whose row write was pending when another node
// claimed, delivered and acked the message is recorded on a new row
// afterwards).
func (c *checker) ackLife(k chkKey) {
	l := k.life
	c.endLife(k)
	if l == nil {
		return
	}
	// Only a failure whose sending incarnation is still up can be
	// recorded later: a crash loses the result with the node's memory
	// (seed 223666: three timeouts of crashed incarnations were carried
	// into the next lifetime and the fresh sends after it exceeded the
	// limit).
	var live []int64
	for _, req := range l.failed {
		if c.alive(req) {
			live = append(live, req)
		}
	}
	if carry := min(l.unsettled+l.excused, len(l.failed)-l.recorded, len(live)); carry > 0 {
		c.lifeSeq++
		carried := slices.Clone(live[len(live)-carry:])
		next := &chkLife{id: c.lifeSeq, sends: carry, unsettled: carry, open: carried, failed: slices.Clone(carried)}
		// A carried permanent answer still earns the dead letter its
		// node writes on a new row (seed 12978: node-2's direct send was
		// answered 422 while node-1's send of the same event was answered
		// 2xx and acked; node-2 then dead-lettered it, as the policy says).
		for _, req := range carried {
			if slices.Contains(l.permReqs, req) {
				next.permReqs = append(next.permReqs, req)
			}
		}
		k.life = next
	}
}

func (c *checker) wireSend(o *Observation, k chkKey) {
	l := c.life(k)
	e := c.events[k.event]
	l.sends++
	l.unsettled++
	l.open = append(l.open, o.Request)
	r := c.rq(o.Request)
	r.life, r.hasLife = l.id, true
	r.inc, r.hasInc = chkInc{o.Node, c.node(o.Node).downs}, true
	// The attempt this send makes, as the store implies it: the claimed
	// row's count + 1 (a claim is spent by one send from its row), or 1
	// for a send made without a claim (a fresh arrival sent directly). A
	// direct send does not spend the claim, even one observed before it
	// in the same step (seeds 120637, 125315: the claim of the row came
	// first, the fresh arrival's direct send took its number, 2, and the
	// timeout of that send, recorded with the backoff of attempt 1, was
	// judged as failure 2).
	nk := c.nk(o.Node, k)
	n := 1
	if nk.hasClaimedNo && !o.Direct {
		n = nk.claimedNo
		nk.claimedNo, nk.hasClaimedNo = 0, false
	}
	r.no = n
	fresh := 0 // further arrivals of the event at engines: each may be sent directly
	if e != nil {
		fresh = max(e.arrivals-1, 0)
	}
	if limit := c.p.MaxAttempts + l.excused + fresh; l.sends > limit {
		c.report(InvBoundedRetry, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"%d sends in one lifetime of the message exceed MaxAttempts=%d, plus %d sends superseded by a new claim before their outcome was recorded, plus %d fresh arrivals of the event",
			l.sends, c.p.MaxAttempts, l.excused, fresh)
	}
	if !l.nextAt.IsZero() && !o.Clock.IsZero() && o.Clock.Before(l.nextAt.Add(-chkTimeSlack)) {
		// Excused: the hand-off of a fresh arrival at this node, sent
		// directly beside the queued copy, including its redo after a
		// store fault interrupted it.
		last, ok := c.lastArrival[chkNodeEvent{o.Node, o.EventID}]
		arrived := last.at
		fresh := ok && (!arrived.Before(l.failedAt) || !c.storeFaultAt[o.Node].Before(arrived))
		if !fresh {
			c.report(InvRetryBackoff, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID)+"\x00early",
				"node %s sent it at %s by its clock, %s before the next-attempt time %s its last failure set",
				o.Node, o.Clock.UTC().Format(time.RFC3339Nano), l.nextAt.Sub(o.Clock), l.nextAt.UTC().Format(time.RFC3339Nano))
		}
	}
}

// chkTimeSlack absorbs a backend's time resolution (PostgreSQL keeps
// microseconds) and the engine's rounding of the jitter.
const chkTimeSlack = time.Millisecond

// wireOutcome counts a failure answered on the wire to the message's
// current lifetime (a failure recorded late is recorded on the row that
// exists when it is), or to the snapshot change's webhook-id.
func (c *checker) wireOutcome(o *Observation) {
	if o.Outcome == "ok" {
		c.rq(o.Request).dropLife()
		return
	}
	k := c.key(o.Bot, o.EventID)
	if o.Snapshot {
		if o.Outcome != OutcomeLost {
			// A change the engine gave up waiting on is not a failure
			// answered under its id: the engine may send it again
			// without counting an attempt.
			c.snapFails[k]++
		}
		if permanentAnswer(o) {
			c.snapFails[k] = max(c.snapFails[k], c.p.MaxAttempts) // given up at once
		}
		return
	}
	if o.Outcome == OutcomeLost {
		c.breakerLost(o)
		// A request sent from a row that is gone (acked, trimmed) by now
		// owes nothing more; one sent with no row is recorded on a new
		// one when the engine gives up on it, unless the message is a
		// dead letter (seed 9352: a replay sent a dead letter's event
		// directly; the row the engine then writes is the dead one).
		_, stored := c.stored[k]
		dead := k.isDead
		if c.alive(o.Request) && !dead && (o.Direct || stored) {
			c.promptLost(k)
		}
		if !o.Direct {
			// Sent from a row: the engine gives up on it without
			// recording an attempt (the row's lease lapses and the
			// message is claimed again), so it is no failure of the
			// lifetime, and no later Fail will record it (seed 3106:
			// three such requests carried past an ack cut the next
			// lifetime's allowance).
			c.rq(o.Request).dropLife()
			return
		}
		if c.alive(o.Request) {
			// The engine records it as a failed attempt when it gives
			// up, with no answer to time the backoff from.
			nk := c.nk(o.Node, k)
			c.lostPend[nk] = append(c.lostPend[nk], o.Request)
			c.lostRowless[nk] = append(c.lostRowless[nk], o.Request)
		}
	}
	l := c.life(k)
	l.failed = append(l.failed, o.Request)
	if permanentAnswer(o) {
		l.permReqs = append(l.permReqs, o.Request)
	}
	if r := c.rq(o.Request); r.hasLife && r.life != l.id && c.alive(o.Request) {
		// Sent in a lifetime an Ack has closed since: no Fail has
		// recorded this failure yet, and the node may still record it
		// on a new row, so a later Ack carries it on like an unsettled
		// send's (seed 71853: a timeout answered after another node's
		// ack, recorded on a new row after a second ack).
		l.unsettled++
		l.open = append(l.open, o.Request)
	}
	c.rq(o.Request).dropLife()
}

// permanentAnswer: o's request was answered a status the policy
// dead-letters at once (impl.PermanentStatus).
func permanentAnswer(o *Observation) bool {
	return o.Outcome == "status" && impl.PermanentStatus(o.Status)
}

// wireTold: a result reached a live node. A 2xx for a message with no row
// in the store (a direct send) ends its lifetime, as an Ack would, once no
// other send of it is unsettled; a failure starts the node's backoff clock
// for the message.
func (c *checker) wireTold(o *Observation) {
	k := c.key(o.Bot, o.EventID)
	if o.Snapshot {
		return
	}
	r := c.rq(o.Request)
	r.toldAt, r.hasToldAt = c.now, true
	if permanentAnswer(o) && c.alive(o.Request) {
		c.permanentTold(o, k)
	}
	if o.OK {
		_, stored := c.stored[k]
		dead := k.isDead
		if l := k.life; l != nil && !stored && !dead {
			// Settled with nothing to write; the lifetime ends unless
			// another send's failure may still be recorded on a row.
			l.unsettled = max(l.unsettled-1, 0)
			l.dropOpen(o.Request)
			if l.unsettled == 0 {
				c.endLife(k)
			}
		}
		return
	}
	nk := c.nk(o.Node, k)
	n := max(c.rq(o.Request).no, 1)
	t, ok := nk.told, nk.hasTold
	if !ok {
		t.first, t.n = o.Clock, n
	}
	t.last, t.n = o.Clock, min(t.n, n)
	nk.told, nk.hasTold = t, true
}

func (c *checker) rejected(o *Observation) {
	if !o.Clock.IsZero() {
		// A timestamp rejection is the engine's only if the timestamp
		// was already out of tolerance when the request left it: a
		// request the network delivered late is stale through no fault
		// of the signer.
		r := c.rq(o.Request)
		sent, ok := r.sentAt, r.hasSentAt
		if ok && chkAbs(o.Clock.Sub(sent)) <= c.p.ReceiverTolerance {
			c.stats.LateRejections++
			return
		}
	}
	if strings.Contains(o.Detail, "signature") {
		// Signed before the bot's key rotation, read after the old key
		// was retired: held on the wire across both (webhook-late).
		r := c.rq(o.Request)
		sent, ok := r.sentAt, r.hasSentAt
		rot, retired := c.keyRotated[o.Bot], c.keyRetired[o.Bot]
		if ok && !rot.IsZero() && sent.Before(rot) && !retired.Before(rot) {
			c.stats.LateRejections++
			return
		}
	}
	c.report(InvSignedVerify, o.Bot, o.EventID, "",
		"the bot's receiver rejected request %d that an engine signed: %s", o.Request, o.Detail)
}

// keyChange books a bot's key rotation or retirement (rejected).
func (c *checker) keyChange(o *Observation) {
	if c.keyRotated == nil {
		c.keyRotated, c.keyRetired = map[string]time.Time{}, map[string]time.Time{}
	}
	if o.Kind == ObsKeyRotated {
		c.keyRotated[o.Bot] = o.Time
	} else {
		c.keyRetired[o.Bot] = o.Time
	}
}

func chkAbs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// claimed: a committed claim supersedes the message's unsettled sends
// whose node never learned their outcome: their outcomes may never be
// recorded. A send whose answer reached its node (still up, with no store
// fault since, within a lease of the send) stays unsettled: that node must
// record it (Fail or Ack), and an engine that is told failures and lets
// the lease lapse instead of recording them earns no extra sends
// (bounded-retry). Unless the claim came while the send's lease still
// ran: the claimer's clock, ahead of the sender's, saw the lease over
// (leases are judged by the store's clock, check_lease.go), and the
// sender, with time left, may record the outcome after the claim (seed
// 151950: a 2xx acked after the AckDelay, by when a node 73 s ahead had
// claimed the row and sent it a third time).
func (c *checker) claimed(o *Observation) {
	for _, m := range o.Messages {
		k := c.key(m.Subscriber, m.EventID)
		if l := k.life; l != nil {
			kept := l.open[:0]
			for _, req := range l.open {
				if c.learned(req) && !c.leaseRunning(req) {
					kept = append(kept, req)
					continue
				}
				l.excused++
				l.unsettled = max(l.unsettled-1, 0)
			}
			l.open = kept
		}
		nk := c.nk(o.Node, k)
		nk.claimedNo, nk.hasClaimedNo = m.Attempts+1, true
		nk.claimAt = c.now
	}
}

// account books one committed Fail of k by o.Node against a send of the
// lifetime, or as the repeat of an ambiguous one; it reports whether it
// was accounted for.
//
// A repeat is matched first: the node was told its last Fail of this
// message failed, so its next one most likely records the same failure
// again, even while other sends of the message are unsettled (seed 23791:
// another node's direct sends, delivered and never acked, kept the
// lifetime unsettled, and the repeat was booked as a new failure recorded,
// leaving the dead letter it made unearned).
func (c *checker) account(o *Observation, k chkKey, l *chkLife) bool {
	nk := c.nk(o.Node, k)
	c.lastFail[o.Node] = k
	switch {
	case c.ambiguousFail[nk] > 0:
		c.ambiguousFail[nk]--
		l.repeats++
		return true
	case l.unsettled > 0:
		l.unsettled--
		l.recorded++
		l.settleOne(c, o.Node)
		return true
	}
	return false
}

// learned: the node that sent req was told its outcome, is still the
// incarnation that sent it, has had no store fault since, and was told it
// within a lease of the send (a later answer the engine may have given up
// on).
func (c *checker) learned(req int64) bool {
	r := c.rq(req)
	at, ok := r.toldAt, r.hasToldAt
	if !ok || !c.alive(req) {
		return false
	}
	inc := r.inc
	if t, ok := c.storeFaultAt[inc.node]; ok && !t.Before(at) {
		return false
	}
	sent, ok := r.sentAt, r.hasSentAt
	return ok && at.Before(sent.Add(c.p.Lease))
}

// leaseRunning: req was sent under a lease that, by the true time, has
// not run out yet.
func (c *checker) leaseRunning(req int64) bool {
	r := c.rq(req)
	return r.leased && r.hasSentAt && c.now.Before(r.sentAt.Add(c.p.Lease))
}

// dropOpen forgets req among the unsettled sends.
func (l *chkLife) dropOpen(req int64) {
	if i := slices.Index(l.open, req); i >= 0 {
		l.open = slices.Delete(l.open, i, i+1)
	}
}

// settleOne removes the send a committed Fail by node accounts for: the
// oldest one node was told the outcome of, else node's oldest, else the
// oldest.
func (l *chkLife) settleOne(c *checker, node string) {
	if len(l.open) == 0 {
		return
	}
	pick := -1
	for i, req := range l.open {
		r := c.rq(req)
		if r.inc.node != node {
			continue
		}
		if r.hasToldAt {
			pick = i
			break
		}
		if pick < 0 {
			pick = i
		}
	}
	pick = max(pick, 0)
	l.open = slices.Delete(l.open, pick, pick+1)
}

// Permanent statuses (bounded-retry): when a live node is told a status
// the policy dead-letters at once (impl.PermanentStatus), it records the
// failure in the step that tells it, and a committed Fail of the message
// by that node in that step must leave the row dead. A node whose last
// Fail of the message in that step left the row live recorded the failure
// as one to retry: an engine that retries what cannot succeed. A Fail that
// does not commit (another node holds the row: its outcome counts) or a
// store fault (the record is retried later, excused) is no violation.

// permanentTold books the answer.
func (c *checker) permanentTold(o *Observation, k chkKey) {
	nk := c.nk(o.Node, k)
	if _, ok := c.permTold[nk]; !ok {
		c.permPend = append(c.permPend, nk)
	}
	c.permTold[nk] = chkPermTold{status: o.Status, at: c.now, step: c.step}
}

// permanentFail books a committed Fail by nk's node in the answer's step.
func (c *checker) permanentFail(nk chkNodeKey, dead bool) {
	if pt, ok := c.permTold[nk]; ok && pt.step == c.step {
		pt.failed, pt.dead = true, dead
		c.permTold[nk] = pt
	}
}

// permanentDue judges the answers of steps before step.
func (c *checker) permanentDue(step int64) {
	if len(c.permPend) == 0 {
		return
	}
	kept := c.permPend[:0]
	for _, nk := range c.permPend {
		pt := c.permTold[nk]
		if pt.step >= step {
			kept = append(kept, nk)
			continue
		}
		delete(c.permTold, nk)
		if !pt.failed || pt.dead {
			continue
		}
		if t, ok := c.storeFaultAt[nk.node.name]; ok && !t.Before(pt.at) {
			continue
		}
		c.report(InvBoundedRetry, nk.key.bot, nk.key.event, chkOnce(nk.key.bot, nk.key.event)+"\x00permanent",
			"node %s was told status %d at %s, which the policy dead-letters at once (impl.PermanentStatus), and recorded the failure leaving the row live",
			nk.node.name, pt.status, pt.at.UTC().Format(time.RFC3339Nano))
	}
	c.permPend = kept
}

// failed checks a committed Fail that left the message live: its
// next-attempt time keeps the backoff bounds (retry-backoff).
func (c *checker) failed(o *Observation) {
	if len(o.Messages) == 0 {
		return
	}
	m := o.Messages[0]
	k := c.key(m.Subscriber, m.EventID)
	l := c.life(k)
	counted := c.account(o, k, l)
	nk := c.nk(o.Node, k)
	told, wasTold := nk.told, nk.hasTold
	nk.told, nk.hasTold = chkTold{}, false
	nk.claimedNo, nk.hasClaimedNo = 0, false // a claim spent on recording an outcome, not on a send
	l.nextAt, l.failedAt = m.NextAttemptAt, o.Time
	c.permanentFail(nk, false)
	if c.recordLost(nk, l) {
		// This Fail may record a request the node gave up waiting on
		// (due at once), not the failure it was told of (seed 8294: a
		// told timeout whose Fail found the row taken over, then an
		// expired direct send recorded 17s later).
		return
	}
	if !counted || !wasTold || told.first.IsZero() {
		return
	}
	// The failure's number is the attempt its send made, as the store
	// implied it at the send (see wireSend); the upper bound allows the
	// row's count too.
	n := max(told.n, 1)
	lo := told.first.Add(c.backoffBase(n) - chkTimeSlack)
	hiBase := c.backoffBase(max(n, l.recorded, m.Attempts))
	hi := told.last.Add(c.jitterTop(hiBase) + chkTimeSlack)
	switch {
	case m.NextAttemptAt.Before(lo):
		c.report(InvRetryBackoff, k.bot, k.event, chkOnce(k.bot, k.event)+"\x00short",
			"node %s set the next attempt %s after the failure reached it, below the backoff of failure %d (%s)",
			o.Node, m.NextAttemptAt.Sub(told.first), n, c.backoffBase(n))
	case m.NextAttemptAt.After(hi):
		c.report(InvRetryBackoff, k.bot, k.event, chkOnce(k.bot, k.event)+"\x00long",
			"node %s set the next attempt %s after the failure reached it, beyond the backoff bound %s x (1 + %v)",
			o.Node, m.NextAttemptAt.Sub(told.last), hiBase, c.p.JitterFraction)
	default:
		c.jitterDrawn(o, k, told, n, m.NextAttemptAt)
	}
}

// recordLost books a Fail of nk that may record the oldest direct request
// the node gave up on: that lost request is a failure of the lifetime the
// engine records it in, even when it was sent before an ack, a requeue or
// a trim closed the lifetime it was sent in (seed 34 with the backlog
// fix: a hung direct send, the message dead-lettered, requeued and
// delivered meanwhile, then recorded on a new row that one more failure
// made dead). It reports whether one was pending.
func (c *checker) recordLost(nk chkNodeKey, l *chkLife) bool {
	pend := c.lostPend[nk]
	if len(pend) == 0 {
		return false
	}
	if !slices.Contains(l.failed, pend[0]) {
		l.failed = append(l.failed, pend[0])
	}
	if len(pend) == 1 {
		delete(c.lostPend, nk)
	} else {
		c.lostPend[nk] = pend[1:]
	}
	return true
}

// lostOnNewRow: a new row nk's node writes leased to itself records a
// failed direct send of its own (its row, then a Fail), which may be one
// it gave up waiting on: such a failure belongs to the new row's lifetime
// even when the lifetime it was sent in has ended since, and a Fail there
// was taken for it (recordLost cannot tell which request a Fail records).
// Seed 39348: a direct send never answered, then a 502 and a timeout made
// the row dead; a requeue and another node's ack later, the give-up after
// the lease wrote a new row (Attempts 1), and one more failure made it
// dead at MaxAttempts 2.
func (c *checker) lostOnNewRow(nk chkNodeKey) {
	lost := c.lostRowless[nk]
	if len(lost) == 0 {
		return
	}
	delete(c.lostRowless, nk)
	l := c.life(nk.key)
	for _, req := range lost {
		if c.alive(req) && !slices.Contains(l.failed, req) {
			l.failed = append(l.failed, req)
		}
	}
}

// jitterTop is the top of a wait of base d with the policy's jitter: the
// engine's jitter lies in [0, JitterFraction*d).
func (c *checker) jitterTop(d time.Duration) time.Duration {
	return d + time.Duration(math.Ceil(c.p.JitterFraction*float64(d)))
}

// backoffBase is base(n) = min(InitialBackoff * Multiplier^(n-1), MaxBackoff).
func (c *checker) backoffBase(n int) time.Duration {
	b := float64(c.p.InitialBackoff) * math.Pow(c.p.Multiplier, float64(n-1))
	if b > float64(c.p.MaxBackoff) || math.IsInf(b, 0) || math.IsNaN(b) {
		b = float64(c.p.MaxBackoff)
	}
	return time.Duration(math.Round(b))
}

// deadLettered checks a row read back dead after a committed Fail
// (dead-letter-earned).
func (c *checker) deadLettered(o *Observation) {
	k := c.key(o.Bot, o.EventID)
	l := c.life(k)
	c.account(o, k, l)
	nk := c.nk(o.Node, k)
	nk.told, nk.hasTold = chkTold{}, false
	nk.claimedNo, nk.hasClaimedNo = 0, false
	c.permanentFail(c.nk(o.Node, k), true)
	c.recordLost(c.nk(o.Node, k), l)
	if len(l.failed)+l.repeats < c.p.MaxAttempts && len(l.permReqs) == 0 {
		c.report(InvDeadLetterEarned, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID),
			"the store holds it dead after node %s's Fail, but the bots answered only %d of its %d sends in this lifetime with a failure (MaxAttempts=%d, %d ambiguous Fail repeats)",
			o.Node, len(l.failed), l.sends, c.p.MaxAttempts, l.repeats)
	}
}

// finishWire: dead rows nobody was seen to earn, and cursor progress.
func (c *checker) finishWire(final CheckFinal, heal time.Time) {
	c.permanentDue(math.MaxInt64)
	for _, m := range final.Messages {
		k := c.key(m.Subscriber, m.EventID)
		if seen := k.isDead; m.Dead && !seen {
			c.report(InvDeadLetterEarned, k.bot, k.event, chkOnce(k.bot, k.event),
				"the store ends with it dead, but no committed Fail was seen to make it so")
		}
	}
	c.cursorProgress(final, heal)
	c.ackedAfterDelivery(final, heal)
}

// cursorProgress judges cursor-progress at the end of the run.
func (c *checker) cursorProgress(final CheckFinal, heal time.Time) {
	durable := map[string]impl.Position{}
	for _, cur := range final.Cursors {
		if p, ok := durable[cur.Key.Stream]; !ok || cur.Pos.Compare(p) > 0 {
			durable[cur.Key.Stream] = cur.Pos
		}
	}
	for _, stream := range chkSortedStrings(c.streamEvents) {
		evs := c.streamEvents[stream]
		if len(evs) == 0 || !evs[0].log {
			continue
		}
		last := evs[0]
		for _, e := range evs[1:] {
			if e.pos.Compare(last.pos) > 0 {
				last = e
			}
		}
		member := false
		for _, bot := range c.bots {
			member = member || c.memberAt(stream, bot, last.pos)
		}
		if !member {
			continue
		}
		from := heal
		if last.producedAt.After(from) {
			from = last.producedAt
		}
		// Like liveness: a run ends once the system is quiet after the
		// heal, so a cursor short of its last event then never gets there.
		deadline := from.Add(c.p.LivenessBound)
		reached, ok := c.cursorReached[stream]
		switch {
		case !ok:
			p, has := durable[stream]
			got := "no durable cursor"
			if has {
				got = "its durable cursor at " + chkPos(p)
			}
			c.report(InvCursorProgress, "", last.id, "cursor-progress\x00"+stream,
				"stream %s ends with %s, short of its last event at %s (liveness bound %s after %s)",
				stream, got, chkPos(last.pos), c.p.LivenessBound, from.UTC().Format(time.RFC3339Nano))
		case reached.After(deadline):
			c.report(InvCursorProgress, "", last.id, "cursor-progress\x00"+stream,
				"stream %s's durable cursor reached its last event at %s only %s after %s, beyond the liveness bound %s",
				stream, chkPos(last.pos), reached.Sub(from), from.UTC().Format(time.RFC3339Nano), c.p.LivenessBound)
		}
	}
}

// forgetNode drops what a crashed node was told and its unspent claims:
// its next incarnation remembers neither (and reads a different clock).
func (c *checker) forgetNode(node string) {
	c.forgetClaims(node)
	dropNode(c.lostPend, node)
	dropNode(c.lostRowless, node)
	c.dropNodePairs(node, func(p *chkNodePair) { p.told, p.hasTold = chkTold{}, false })
}

// forgetClaims drops a node's unspent claims.
func (c *checker) forgetClaims(node string) {
	c.dropNodePairs(node, func(p *chkNodePair) { p.claimedNo, p.hasClaimedNo = 0, false })
}
