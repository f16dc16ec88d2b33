package oracle

import "time"

// resend-with-cause. At-least-once allows duplicates, but only with a cause
// the world can see. Judged from the wire (sends and the answers each node
// was told), the store's committed state (rows inserted, acknowledged,
// deleted by retention), arrivals, memberships, crashes and the store
// faults told to nodes; never from what the engine says about itself.
//
// A node is done with (bot, event) in its current incarnation once it was
// told a 2xx for a request of it and no row of the message is left in the
// store (the row's Ack or retention delete committed, or the request was a
// direct send with no row). A done node does not send the message again in
// that incarnation unless, after that 2xx was told (in trace order: the
// engine may write the ack in the same step as it takes a new arrival):
//   - the event arrived at it again (an upstream replay or duplicate;
//     whether it may hand the event off again is idempotent-replay's
//     question);
//   - the registry changed the stream's memberships (a rewind is owed);
//   - it was told a failure of another request of the message (a timeout
//     or an error answer is an outcome it may record on a new row);
//   - its store answered it with a fault;
//   - another node, or an earlier incarnation of this one, inserted a row
//     of the message (a durable obligation the node did not make);
//   - an operator requeued the message (it is due at once: seed 22958, a
//     422 dead-lettered a direct send and the requeue a second later was
//     sent at once, inside the first backoff);
//
// or it still has a request of the message of this incarnation that it
// was never told the outcome of (an engine may give up such a request
// after a while and record it as failed: a row, and a retry);
//
// or its store failed a hand-off write (Enqueue, EnqueueLeased,
// WriteHandOff) after the event last arrived at it: an ambiguous enqueue
// may have committed the row that was then delivered, and the node redoes
// the hand-off it was told had failed;
//
// or, once per late join (check_replay.go lateJoinExcuse), a bot joined the
// stream after the event was produced, from a position before it, before
// that 2xx: the node may have applied the join only after it, and the
// join's backfill replays the event.
//
// A failure of a send that had no row in the store when the node was told
// it (a direct send of a fresh arrival) has no committed Fail to be judged
// by (check_wire.go holds queued sends to theirs). Two rules stand in:
//   - retry-backoff, the first attempt's backoff: the node waits at least
//     InitialBackoff by its clock before it sends the message again in
//     that incarnation (no retry policy retries sooner than base(1));
//   - bounded-retry, attempts counted from observed failures: if the node
//     then inserts the message's row itself, the failure is on that row's
//     record before anyone claims it: a claim of it shows Attempts >= 1
//     (a count that silently loses the first failure lets the message be
//     attempted once more than the limit).
//
// Both stand back where one of the causes above appeared after the failure
// (for bounded-retry: the node crashed, or its store answered it with a
// fault, so the record may be late or lost).
type chkResend struct {
	seq int64 // observations so far: "after" is in trace order
	// Per node and message, in its key (chkNodeState): the node's last
	// 2xx told for the message (rsOk: its incarnation, when), the 2xx of
	// a node done with the message (rsDone), the node's last failure told
	// of a send made with no row (rsRowless), a failure of the message
	// told to the node (rsFailed, by seq), and the requests sent and not
	// yet answered to it (rsOpenN).
	//
	// inserted: the last insertion of a row of the message, by whom.
	inserted map[chkKey]chkInsert
	// The causes, by when they were last observed (seq).
	arrived  map[chkNodeEvent]chkMark
	membship map[string]int64 // per stream
	fault    map[string]int64 // per node: any store fault
	handOff  map[string]int64 // per node: a store fault of a hand-off write
	requeued map[chkKey]int64 // an operator's requeue of the message
}

type chkOpenKey struct {
	nk    chkNodeKey
	downs int
}

type chkMark struct {
	downs int
	seq   int64
	at    time.Time
}

type chkRowless struct {
	clock    time.Time
	mark     chkMark
	recorded bool // a Fail, requeue or removal of the row since
}

type chkInsert struct {
	inc chkInc
	seq int64
}

func newChkResend() chkResend {
	return chkResend{
		inserted: map[chkKey]chkInsert{},
		arrived:  map[chkNodeEvent]chkMark{},
		membship: map[string]int64{},
		fault:    map[string]int64{},
		handOff:  map[string]int64{},
		requeued: map[chkKey]int64{},
	}
}

// resendObserve numbers every observation and books the causes.
func (c *checker) resendObserve(o *Observation) {
	r := &c.resend
	r.seq++
	switch o.Kind {
	case ObsArrived:
		r.arrived[chkNodeEvent{o.Node, o.EventID}] = c.resendMark(o.Node)
	case ObsMembership:
		r.membship[o.Stream] = r.seq
	case ObsRequeued:
		r.requeued[c.key(o.Bot, o.EventID)] = r.seq
	case ObsStoreFault:
		r.fault[o.Node] = r.seq
		switch o.Method {
		case "Enqueue", "EnqueueLeased", "WriteHandOff":
			r.handOff[o.Node] = r.seq
		}
	}
}

func (c *checker) resendMark(node string) chkMark {
	return chkMark{downs: c.node(node).downs, seq: c.resend.seq, at: c.now}
}

// resendTold books a result told to node for k.
func (c *checker) resendTold(o *Observation, k chkKey) {
	nk := c.nk(o.Node, k)
	if r := c.rq(o.Request); r.hasOpen {
		ok := r.open
		r.open, r.hasOpen = chkOpenKey{}, false
		if ok.nk.rsOpenDowns == ok.downs && ok.nk.rsOpenN > 0 {
			ok.nk.rsOpenN--
		}
	}
	if !o.OK {
		nk.rsFailed = c.resend.seq
		if !c.isStored(k) && c.rq(o.Request).direct && !o.Clock.IsZero() {
			nk.rsRowless, nk.hasRsRowless = chkRowless{clock: o.Clock, mark: c.resendMark(o.Node)}, true
		}
		return
	}
	nk.rsRowless, nk.hasRsRowless = chkRowless{}, false
	m := c.resendMark(o.Node)
	nk.rsOk, nk.hasRsOk = m, true
	if !c.isStored(k) {
		nk.rsDone, nk.hasRsDone = m, true
	}
}

// resendRowGone: k's row left the store; every node told a 2xx for it in
// its current incarnation is now done with it.
func (c *checker) resendRowGone(k chkKey) {
	for _, n := range c.nodeNames {
		nk := c.nk(n, k)
		if m, ok := nk.rsOk, nk.hasRsOk; ok && m.downs == c.node(n).downs {
			nk.rsDone, nk.hasRsDone = m, true
		}
	}
}

// resendInserted books a new row of k inserted by node.
func (c *checker) resendInserted(node string, k chkKey) {
	c.resend.inserted[k] = chkInsert{inc: chkInc{node, c.node(node).downs}, seq: c.resend.seq}
}

// resendSend judges a send by o.Node of k.
func (c *checker) resendSend(o *Observation, k chkKey) {
	nk := c.nk(o.Node, k)
	downs := c.node(o.Node).downs
	if d, ok := nk.rsDone, nk.hasRsDone; ok && d.downs == downs && !c.resendExcused(o.Node, k, d.seq) &&
		!c.lateJoinExcuse(lateResend, o.Node, k, c.events[k.event]) {
		c.report(InvResendWithCause, k.bot, k.event, chkOnce(k.bot, k.event),
			"node %s sent it again although it was told a 2xx for it at %s and no row of it was left in the store, with no new arrival, membership change, failure told, store fault, crash or other node's row since",
			o.Node, d.at.UTC().Format(time.RFC3339Nano))
	}
	if f, ok := nk.rsRowless, nk.hasRsRowless; ok && f.mark.downs == downs && !o.Clock.IsZero() &&
		o.Clock.Before(f.clock.Add(c.p.InitialBackoff-chkTimeSlack)) && !c.resendExcused(o.Node, k, f.mark.seq) {
		c.report(InvRetryBackoff, k.bot, k.event, chkOnce(k.bot, k.event)+"\x00rowless",
			"node %s sent it again %s after it was told the failure of a send made with no row, before the first backoff %s",
			o.Node, o.Clock.Sub(f.clock), c.p.InitialBackoff)
	}
	nk.rsDone, nk.hasRsDone = chkMark{}, false
	nk.rsOk, nk.hasRsOk = chkMark{}, false
	nk.rsRowless, nk.hasRsRowless = chkRowless{}, false
	r := c.rq(o.Request)
	r.open, r.hasOpen = chkOpenKey{nk, downs}, true
	if nk.rsOpenDowns != downs {
		nk.rsOpenN, nk.rsOpenDowns = 0, downs // an earlier incarnation's are never asked about again
	}
	nk.rsOpenN++
}

// resendClaimed judges a committed claim: a row that a node inserted after
// it was told the failure of a rowless send, and whose count does not show
// that failure, breaks bounded-retry.
func (c *checker) resendClaimed(o *Observation) {
	r := &c.resend
	for _, m := range o.Messages {
		if m.Attempts > 0 {
			continue
		}
		k := c.key(m.Subscriber, m.EventID)
		in, ok := r.inserted[k]
		if !ok || in.inc.downs != c.node(in.inc.node).downs {
			continue
		}
		nk := c.nk(in.inc.node, k)
		f, ok := nk.rsRowless, nk.hasRsRowless
		if !ok || f.recorded || f.mark.downs != in.inc.downs || in.seq < f.mark.seq || r.fault[in.inc.node] > f.mark.seq {
			continue
		}
		c.report(InvBoundedRetry, k.bot, k.event, chkOnce(k.bot, k.event)+"\x00unrecorded",
			"node %s was told the failure of a send of it made with no row, then inserted its row, which node %s claimed with Attempts 0: the failure was never counted (no crash or store fault at node %s since)",
			in.inc.node, o.Node, in.inc.node)
	}
}

// resendRecorded: a committed Fail, a requeue or the row's removal has
// settled what the store counts for k; earlier rowless failures are no
// longer waiting for their record.
func (c *checker) resendRecorded(k chkKey) {
	for _, n := range c.nodeNames {
		nk := c.nk(n, k)
		if nk.hasRsRowless && nk.rsRowless.mark.seq < c.resend.seq {
			nk.rsRowless.recorded = true
		}
	}
}

// resendExcused: a cause for node to send k again was observed after since
// (see chkResend).
func (c *checker) resendExcused(node string, k chkKey, since int64) bool {
	r := &c.resend
	e := c.events[k.event]
	if e == nil {
		return true // no-phantom-delivery's question
	}
	a, arrived := r.arrived[chkNodeEvent{node, k.event}]
	downs := c.node(node).downs
	nk := c.nk(node, k)
	switch {
	case nk.rsOpenDowns == downs && nk.rsOpenN > 0:
	case arrived && a.downs == downs && a.seq > since:
	case r.membship[e.stream] > since:
	case nk.rsFailed > since:
	case r.fault[node] > since:
	case r.requeued[k] > since:
	case arrived && a.downs == downs && r.handOff[node] > a.seq:
	default:
		in, ok := r.inserted[k]
		return ok && in.seq > since && in.inc != (chkInc{node, downs})
	}
	return true
}
