package sim

import (
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Probe is one situation of the coverage catalogue: something that matters
// to a delivery engine and that a sweep must reach, or its passing verdict
// says nothing about it (FoundationDB's code probes, Antithesis'
// "sometimes" assertions). A run counts how often it saw each, from what
// the simulator observed (the wire, the store's committed state, the
// faults it injected), never from what the engine says about itself.
type Probe struct {
	Name string `json:"name"`
	Doc  string `json:"doc"`
}

// Probe names, stable: they appear in reports, JSON and --require-coverage.
const (
	CovCrashStoreWrite  = "crash/after-store-write-before-send/work-in-flight"
	CovCrashSend        = "crash/after-send-before-ack/work-in-flight"
	CovCrashProcess     = "crash/after-process-before-cursor/work-in-flight"
	CovCrashStep        = "crash/after-step/work-in-flight"
	CovLeaseExpired     = "lease/expired-while-its-send-in-flight"
	CovHalfOpenFails    = "breaker/half-open-probe-fails"
	CovHalfOpenSucceeds = "breaker/half-open-probe-succeeds"
	CovRequeuedDeliver  = "dead-letter/requeued-then-delivered"
	CovTTLNextToLease   = "retention/ttl-deletes-next-to-a-leased-message"
	CovCapNextToLease   = "retention/cap-trims-next-to-a-leased-message"
	CovTTLNearCutoff    = "retention/ttl-cutoff-within-1s-of-a-message"
	CovRedelivered      = "upstream/event-redelivered-to-a-rebooted-node"
	CovLateBelowCursor  = "upstream/timestamp-event-arrives-below-the-cursor"
	CovTwoNodesSameMsg  = "nodes/two-nodes-send-the-same-message"
	CovBeyondWindow     = "receiver/duplicate-beyond-the-dedup-window"
	CovBatchedMixed     = "engine/batched-results-with-a-success-and-a-failure"
	CovFailedRedeliver  = "receiver/failed-handler-run-then-handled"
	CovHTTPDuplicate    = "receiver/http-entry-answers-a-duplicate"
	CovResumeOverlap    = "upstream/resumed-log-subscription-replays-before-its-position"
	CovBackfilled       = "membership/backfilled-event-handled"
	CovBackfillCrash    = "membership/backfilled-event-handled-after-a-crash"
	CovSourceReverted   = "snapshot/reverted-version-handled"
	CovLateResent       = "lease/late-answer-after-the-message-was-sent-again"
	covAmbiguousPrefix  = "store/ambiguous-commit/"
	// Request expiry (webhook-hang, result-lost): a request whose outcome
	// its node is never told, and what the node does about it.
	CovLostResent    = "expiry/unanswered-request-sent-again"
	CovLostDirect    = "expiry/unanswered-direct-send-written-to-the-queue"
	CovLostProbe     = "expiry/unanswered-half-open-probe-sent-again"
	CovLostSnapshot  = "expiry/unanswered-snapshot-change-sent-again"
	CovLostProcessed = "expiry/processed-but-unanswered-request-sent-again"
)

// ambiguousMethods are the store writes the reference engine makes in a
// simulation (PutCursorBlind is a known-bug variant's only).
var ambiguousMethods = []string{
	"Enqueue", "EnqueueLeased", "Claim", "Ack", "Fail", "Requeue",
	"AdvanceCursors", "DeleteExpired", "TrimPerSubscriber", "RecordDelivered", "WriteHandOff",
}

var catalogue = func() []Probe {
	ps := []Probe{
		{CovCrashStoreWrite, "a node crashes at the crash point after a store write and before its send, with other requests or async cursor writes of its own unanswered"},
		{CovCrashSend, "a node crashes at the crash point after a send and before its answer is recorded, with requests or cursor writes in flight"},
		{CovCrashProcess, "a node crashes at the crash point after handing events off and before the cursor write, with requests or cursor writes in flight"},
		{CovCrashStep, "a node crashes right after an input step, losing its effects, with requests or cursor writes in flight"},
		{CovLeaseExpired, "a claim takes a message whose earlier request is still unanswered on the wire: its lease lapsed mid-send"},
		{CovHalfOpenFails, "a bot failed enough in a row to open its breaker, went quiet for the open period, and the next request (the half-open probe) failed"},
		{CovHalfOpenSucceeds, "as above, and the half-open probe succeeded"},
		{CovRequeuedDeliver, "a dead letter requeued by the operator later reached its bot's handler"},
		{CovTTLNextToLease, "a TTL cleanup deleted messages of a bot that has a message under an active lease"},
		{CovCapNextToLease, "a cap trim deleted messages of a bot that has a message under an active lease"},
		{CovTTLNearCutoff, "a TTL cleanup ran with a queued message created within 1s of its cutoff"},
		{CovRedelivered, "the upstream delivered an event to a node that had received it before its last crash"},
		{CovLateBelowCursor, "a timestamp event reached a node with a position below the stream's durable cursor (producer skew)"},
		{CovTwoNodesSameMsg, "two different nodes sent requests for the same (bot, event)"},
		{CovBeyondWindow, "a bot's handler ran again for an event after the receiver's dedup window or cache had forgotten it"},
		{CovBatchedMixed, "a node was handed several webhook answers at once (engine.WebhookResults), at least one a success and one a failure"},
		{CovFailedRedeliver, "a bot's handler failed for an event (the receiver forgot the id) and a later request of it was handled"},
		{CovHTTPDuplicate, "a bot serving through the HTTP Handler or Middleware answered a request as a duplicate"},
		{CovResumeOverlap, "a resumed log-stream subscription was served an event at or before the position it asked for (Workload.ResumeOverlap)"},
		{CovLostResent, "a node was never told the outcome of its request (webhook-hang, result-lost) and, still up, sent the message again"},
		{CovLostDirect, "a node was never told the outcome of a request it sent with no queue row and, still up, wrote the message to the queue"},
		{CovLostProbe, "a node was never told the outcome of its half-open breaker probe and, still up, sent the bot the message again"},
		{CovLostSnapshot, "a node was never told the outcome of a snapshot change and, still up, sent the app a change of that source again"},
		{CovLostProcessed, "the bot processed a request whose answer its node was never told (result-lost), and the node, still up, sent it again"},
		{CovBackfilled, "a bot's handler ran an event produced before the registry entry that made the bot its member (a join that starts behind the stream's head)"},
		{CovBackfillCrash, "as above, with a node crash between the join and the handler run"},
		{CovLateResent, "a bot answered a request only after its node had given up on it (webhook-late: past the claim's lease and the engine's request expiry), and the message had been sent again meanwhile"},
		{CovSourceReverted, "an app's handler ran a change giving it an item's version that its snapshot source had left and then returned to (a source that reverts to an earlier state)"},
	}
	for _, m := range ambiguousMethods {
		ps = append(ps, Probe{covAmbiguousPrefix + m, "a " + m + " call committed and its caller saw an error (impl.ErrAmbiguous)"})
	}
	docs := []string{
		"a timestamp event with the same created_at as another event of its stream, different id, reached a handler",
		"an event produced in the same instant as an event of another stream reached a handler",
		"a decimal id with a digit count not seen before in the run (or a leading zero) reached a handler",
		"an id with a byte that needs escaping in JSON, SQL, LIKE or headers reached a handler",
		"a non-ASCII id reached a handler",
		"an id equal to another under case folding or unicode normalization reached a handler",
		"an empty payload reached a handler",
		"a payload of 16 KiB or more reached a handler",
		"a payload byte-identical to another event's reached a handler",
		"a payload with quotes, backslashes, control bytes, CR/LF, a BOM or invalid UTF-8 reached a handler",
		"a log event at minipool index 10, 100 or 1000 reached a handler",
		"a log event in a miniblock numbered a power of ten or past 2^31 reached a handler",
	}
	for i, n := range traitNames {
		ps = append(ps, Probe{n, docs[i]})
	}
	return append(append(append(ps, boundaryProbes...), edgeProbes...), jumpProbes...)
}()

// Catalogue lists every probe, in report order.
func Catalogue() []Probe { return append([]Probe(nil), catalogue...) }

var probeIndex = func() map[string]int {
	m := map[string]int{}
	for i, p := range catalogue {
		m[p.Name] = i
	}
	return m
}()

// coverage counts the probes of one run.
type coverage struct {
	s      *sim
	counts []int

	// Sends still unanswered on the wire, per message and per node.
	open     map[impl.MessageKey]int
	nodeOpen map[string]int
	senders  map[impl.MessageKey]string // the node of the last send; "*" once two nodes sent
	// breakers: per node and bot, failures in a row and the last one's time
	// (forgotten when the node crashes, as the engine forgets its breaker).
	breakers map[[2]string]*covBreaker
	requeued map[impl.MessageKey]bool
	arrived  map[[2]string]int // node, event -> incarnation it last arrived in
	cursors  map[string]impl.Position
	tsPos    map[string]impl.Position // timestamp events' positions
	// lostReqs: per node and message (for a snapshot change: per node,
	// app and source), the request its node was never told about, while
	// that incarnation is up and has not sent the message since.
	lostReqs map[[3]string]covLost
	// backOwed: (bot, event) obligations a backfilling join created, and
	// when; lastDown: the last time a node went down.
	backOwed map[impl.MessageKey]time.Time
	lastDown time.Time
	// srcNow: per snapshot source, its items now; srcHad: every (source,
	// item, version) it ever held; reverted: those it left and returned to.
	srcNow   map[string]map[string]string
	srcHad   map[[3]string]bool
	reverted map[[3]string]bool
	// lastSend: per message, its latest request (late answers look back).
	lastSend map[impl.MessageKey]int64
	// bnd: the boundary probes (boundaries.go).
	bnd *edges
	lse *leaseEdges // leaseedges.go
}

type covLost struct {
	inc             int
	direct, probe   bool
	processed, snap bool
}

type covBreaker struct {
	fails   int
	lastBad time.Time
	probe   string // event id of the half-open probe in flight
}

func newCoverage(s *sim) *coverage {
	c := &coverage{
		s: s, counts: make([]int, len(catalogue)),
		open: map[impl.MessageKey]int{}, nodeOpen: map[string]int{}, senders: map[impl.MessageKey]string{},
		breakers: map[[2]string]*covBreaker{}, requeued: map[impl.MessageKey]bool{},
		arrived: map[[2]string]int{}, cursors: map[string]impl.Position{}, tsPos: map[string]impl.Position{},
		lostReqs: map[[3]string]covLost{},
		backOwed: map[impl.MessageKey]time.Time{},
		srcNow:   map[string]map[string]string{}, srcHad: map[[3]string]bool{}, reverted: map[[3]string]bool{},
		lastSend: map[impl.MessageKey]int64{},
	}
	c.bnd = newEdges(c)
	c.lse = &leaseEdges{c: c, sentAt: map[int64]leaseSend{}}
	return c
}

// sourceState books which item versions a snapshot source returns to.
func (c *coverage) sourceState(o *oracle.Observation) {
	now := map[string]string{}
	for _, it := range o.Items {
		now[it.ID] = it.Version
		k := [3]string{o.Stream, it.ID, it.Version}
		if old, ok := c.srcNow[o.Stream][it.ID]; (!ok || old != it.Version) && c.srcHad[k] {
			c.reverted[k] = true
		}
		c.srcHad[k] = true
	}
	c.srcNow[o.Stream] = now
}

// lost books request sd of node incarnation inc, whose outcome the node
// will never be told.
func (c *coverage) lost(n *node, inc int, sd engine.Send, processed, direct bool) {
	if n.inc != inc || !n.up {
		return
	}
	l := covLost{inc: inc, processed: processed, snap: sd.Snapshot}
	k := [3]string{n.name, sd.Bot, sd.EventID}
	if sd.Snapshot {
		k[2] = "snapshot:" + sd.Stream
	} else {
		l.direct = direct
		l.probe = c.breaker(n.name, sd.Bot).probe == sd.EventID
	}
	c.lostReqs[k] = l
}

// lostThen sees node's send (or, enqueued, its new queue row) of what k
// names after a request of it was lost.
func (c *coverage) lostThen(k [3]string, enqueued bool) {
	l, ok := c.lostReqs[k]
	if !ok {
		return
	}
	if n := c.s.nodes[nodeIndex(c.s, k[0])]; n.inc != l.inc || !n.up {
		delete(c.lostReqs, k)
		return
	}
	if enqueued {
		if l.direct {
			c.hit(CovLostDirect)
		}
		return
	}
	delete(c.lostReqs, k)
	switch {
	case l.snap:
		c.hit(CovLostSnapshot)
		return
	case l.probe:
		c.hit(CovLostProbe)
	}
	c.hit(CovLostResent)
	if l.processed {
		c.hit(CovLostProcessed)
	}
}

func (c *coverage) hit(name string) { c.counts[probeIndex[name]]++ }

// busy says whether node n has work in flight: requests unanswered or
// async cursor writes not yet landed.
func (c *coverage) busy(n *node) bool { return c.nodeOpen[n.name] > 0 || n.cursorsOpen > 0 }

// crash counts an injected crash of n (k a crash kind) with work in flight.
func (c *coverage) crash(n *node, k faults.Kind) {
	if !c.busy(n) {
		return
	}
	switch k {
	case faults.CrashAfterStoreWrite:
		c.hit(CovCrashStoreWrite)
	case faults.CrashAfterSend:
		c.hit(CovCrashSend)
	case faults.CrashAfterProcess:
		c.hit(CovCrashProcess)
	case faults.Crash:
		c.hit(CovCrashStep)
	}
}

// membership books the obligations a join creates for events already
// produced (it starts behind the stream's head): the registry holds the
// entry, last, when it is observed.
func (c *coverage) membership(o *oracle.Observation) {
	st := c.s.byStream[o.Stream]
	if !o.Member || st == nil {
		return
	}
	earlier := c.s.regMembers[:len(c.s.regMembers)-1]
	for _, e := range st.events {
		if e.Pos.Compare(o.Pos) > 0 && !memberIn(earlier, o.Stream, o.Bot, e.Pos) {
			c.backOwed[impl.MessageKey{Subscriber: o.Bot, EventID: e.ID}] = o.Time
		}
	}
}

// memberIn applies the registry entries ms to (stream, bot) at pos.
func memberIn(ms []engine.Membership, stream, bot string, pos impl.Position) bool {
	member := false
	for _, m := range ms {
		if m.Stream == stream && m.Bot == bot && pos.Compare(m.From) > 0 {
			member = m.Member
		}
	}
	return member
}

// claimed sees the messages a Claim leased.
func (c *coverage) claimed(msgs []impl.Message) {
	for i := range msgs {
		if c.open[msgs[i].Key()] > 0 {
			c.hit(CovLeaseExpired)
		}
	}
}

// answered closes one send to (bot, event) on the wire; current says the
// node that sent it is still the incarnation that did.
func (c *coverage) answered(node string, k impl.MessageKey, current bool) {
	if c.open[k]--; c.open[k] <= 0 {
		delete(c.open, k)
	}
	if current {
		c.nodeOpen[node]--
	}
	c.bnd.answered(node, k.Subscriber)
}

// lateAnswer: request req of k was answered after its node gave up on it.
func (c *coverage) lateAnswer(k impl.MessageKey, req int64) {
	if c.lastSend[k] > req {
		c.hit(CovLateResent)
	}
}

// see derives the probes that observations show.
func (c *coverage) see(o *oracle.Observation) {
	c.bnd.see(o)
	c.lse.see(o)
	switch o.Kind {
	case oracle.ObsProduced:
		if !o.LogStream {
			c.tsPos[o.EventID] = o.Pos
		}
	case oracle.ObsEnqueued:
		for i := range o.Messages {
			c.lostThen([3]string{o.Node, o.Messages[i].Subscriber, o.Messages[i].EventID}, true)
		}
	case oracle.ObsSend:
		if o.Snapshot {
			c.lostThen([3]string{o.Node, o.Bot, "snapshot:" + o.Stream}, false)
			return
		}
		c.lostThen([3]string{o.Node, o.Bot, o.EventID}, false)
		k := impl.MessageKey{Subscriber: o.Bot, EventID: o.EventID}
		c.lastSend[k] = o.Request
		c.open[k]++
		c.nodeOpen[o.Node]++
		switch prev := c.senders[k]; {
		case prev == "":
			c.senders[k] = o.Node
		case prev != o.Node && prev != "*":
			c.senders[k] = "*"
			c.hit(CovTwoNodesSameMsg)
		}
		b := c.breaker(o.Node, o.Bot)
		if b.probe == "" && b.fails >= c.s.ecfg.BreakerFailures && o.Time.Sub(b.lastBad) >= c.s.ecfg.BreakerOpenFor {
			b.probe = o.EventID
		}
	case oracle.ObsResult:
		b := c.breaker(o.Node, o.Bot)
		if b.probe == o.EventID && b.probe != "" {
			b.probe = ""
			if o.OK {
				c.hit(CovHalfOpenSucceeds)
			} else {
				c.hit(CovHalfOpenFails)
			}
		}
		// breaker_failures' edges (boundaries.go), before this answer counts.
		switch th := c.s.ecfg.BreakerFailures; {
		case o.OK && b.fails == th-1 && th > 1:
			c.hit(CovBreakerBelow)
		case !o.OK && b.fails == th-1:
			c.hit(CovBreakerAt)
		case !o.OK && b.fails >= th:
			c.hit(CovBreakerAbove)
		}
		if o.OK {
			b.fails = 0
		} else {
			b.fails++
			b.lastBad = o.Time
		}
	case oracle.ObsHandled:
		if o.Snapshot {
			if o.Op != "DELETE" && c.reverted[[3]string{o.Stream, o.Item, o.Version}] {
				c.hit(CovSourceReverted)
			}
			return
		}
		k := impl.MessageKey{Subscriber: o.Bot, EventID: o.EventID}
		if c.requeued[k] {
			delete(c.requeued, k)
			c.hit(CovRequeuedDeliver)
		}
		if at, ok := c.backOwed[k]; ok {
			delete(c.backOwed, k)
			c.hit(CovBackfilled)
			if c.lastDown.After(at) {
				c.hit(CovBackfillCrash)
			}
		}
		if t := c.s.evTraits[o.EventID]; t != 0 {
			for i := range traitNames {
				if t&(1<<i) != 0 {
					c.counts[probeIndex[traitNames[i]]]++
				}
			}
		}
	case oracle.ObsRequeued:
		c.requeued[impl.MessageKey{Subscriber: o.Bot, EventID: o.EventID}] = true
	case oracle.ObsArrived:
		n := c.s.nodes[nodeIndex(c.s, o.Node)]
		key := [2]string{o.Node, o.EventID}
		if inc, ok := c.arrived[key]; ok && inc < n.inc {
			c.hit(CovRedelivered)
		}
		c.arrived[key] = n.inc
		if pos, ok := c.tsPos[o.EventID]; ok {
			if cur, ok := c.cursors[o.Stream]; ok && pos.Compare(cur) < 0 {
				c.hit(CovLateBelowCursor)
			}
		}
	case oracle.ObsCursor:
		if o.Cursor.Key.Subscriber == "" {
			c.cursors[o.Cursor.Key.Stream] = o.Cursor.Pos
		}
	case oracle.ObsCleanup:
		c.cleanup(o)
	case oracle.ObsStoreFault:
		if o.Ambiguous {
			if i, ok := probeIndex[covAmbiguousPrefix+o.Method]; ok {
				c.counts[i]++
			}
		}
	case oracle.ObsMembership:
		c.membership(o)
	case oracle.ObsSourceState:
		c.sourceState(o)
	case oracle.ObsNodeDown:
		c.lastDown = o.Time
		c.nodeOpen[o.Node] = 0
		for k := range c.breakers {
			if k[0] == o.Node {
				delete(c.breakers, k)
			}
		}
	}
}

func (c *coverage) breaker(node, bot string) *covBreaker {
	k := [2]string{node, bot}
	b := c.breakers[k]
	if b == nil {
		b = &covBreaker{}
		c.breakers[k] = b
	}
	return b
}

func (c *coverage) cleanup(o *oracle.Observation) {
	if len(o.Deleted) > 0 {
		touched := map[string]bool{}
		for i := range o.Deleted {
			touched[o.Deleted[i].Subscriber] = true
		}
		for i := range o.Remaining {
			m := &o.Remaining[i]
			if touched[m.Subscriber] && m.LeaseUntil.After(o.Clock) && !m.Dead {
				if o.Rule == "ttl" {
					c.hit(CovTTLNextToLease)
				} else {
					c.hit(CovCapNextToLease)
				}
				break
			}
		}
	}
	if o.Rule == "ttl" {
		for _, ms := range [][]impl.Message{o.Deleted, o.Remaining} {
			for i := range ms {
				if d := ms[i].CreatedAt.Sub(o.Cutoff); d <= time.Second && d >= -time.Second {
					c.hit(CovTTLNearCutoff)
					return
				}
			}
		}
	}
}

// finish adds what only the end of the run knows.
func (c *coverage) finish(st oracle.CheckStats) map[string]int {
	c.counts[probeIndex[CovBeyondWindow]] += st.BeyondWindowDuplicates
	out := make(map[string]int, len(catalogue))
	for i, p := range catalogue {
		out[p.Name] = c.counts[i]
	}
	return out
}

func nodeIndex(s *sim, name string) int {
	for i, n := range s.nodes {
		if n.name == name {
			return i
		}
	}
	return 0
}
