package oracle

import "time"

// acked-after-delivery, during the run: a node told of a 2xx for a request
// it sent from a queue row removes that row by the ack delay it declares
// (CheckParams.AckDelay, 0 = at once), measured on its own clock, which
// may run at half speed under drift: so twice the delay, plus AckSlack.
// The end-of-run rule (check_drain.go) only sees a row that never drains;
// an ack that waits for some unrelated later event (the next hand-off, the
// next claim, the periodic sweep) passes it, yet every such wait is a
// window in which a crash or a lapsed lease turns a delivered message into
// a redundant resend.
//
// The check stands back where the observations leave the engine's duty
// open: the node was told of the result for a request it has since sent
// again, or a lease or more after sending it (the engine may have dropped
// the request); the node crashed, booted or was told of a store fault in
// the window (the ack failed or was lost and is retried later); the row
// changed lifetime (enqueued again, requeued, dead) before the deadline;
// the row was a dead letter when the answer came (a replayed event sent
// beside its dead row).
type chkAckWait struct {
	key      chkKey
	node     string
	toldAt   time.Time
	deadline time.Time
	row      time.Time // the row's c.stored time when the wait began
}

type chkAckPrompt struct {
	queue   []chkAckWait          // in order of toldAt, so deadlines are ordered
	waiting map[chkKey]chkAckWait // key -> the oldest open wait
	// owner: the node that holds a live row's lease, as the store's
	// committed writes show it: the leased enqueue that created the row,
	// or the last claim. A node answered 2xx for a row it does not hold
	// (it sent the event directly beside another node's row) owes no ack.
	owner map[chkKey]string
	// rowReq (chkState.rowReq): the first request the holder sent after
	// it took the row, the one its lease is for. A node that holds a row
	// and also sends the event outside it (a replayed hand-off beside its
	// own claim) is not held to ack the row on that other request's
	// answer.
}

// AckSlack is what acked-after-delivery allows beyond twice the declared
// ack delay: the simulator's store calls take no virtual time, so it only
// covers result batches handed over together.
const AckSlack = time.Second

func newAckPrompt() chkAckPrompt {
	return chkAckPrompt{waiting: map[chkKey]chkAckWait{}, owner: map[chkKey]string{}}
}

// ackSent notes the request a row's holder sends from it.
func (c *checker) ackSent(o *Observation) {
	k := c.key(o.Bot, o.EventID)
	if c.ackp.owner[k] == o.Node {
		if !k.hasRowReq {
			k.rowReq, k.hasRowReq = o.Request, true
		}
	}
}

// ackTold starts the wait for the ack of a row whose 2xx node was told.
func (c *checker) ackTold(o *Observation) {
	k := c.key(o.Bot, o.EventID)
	if o.Node == "" || o.Snapshot || c.rq(o.Request).direct {
		return
	}
	row, stored := c.stored[k]
	if !stored {
		return // already gone (acked by another node, trimmed) or never a row
	}
	if c.ackp.owner[k] != o.Node {
		return // the node does not hold the row (or no longer does)
	}
	if req, ok := k.rowReq, k.hasRowReq; !ok || req != o.Request {
		return // not the request the node sent from the row
	}
	if k.isDead {
		return // a dead letter stays until requeued or trimmed
	}
	if _, open := c.ackp.waiting[k]; open {
		return
	}
	if c.nk(o.Node, k).lastReq != o.Request {
		return // the node has sent it again since: this answer may be stale to it
	}
	if r := c.rq(o.Request); !r.hasSentAt || !c.now.Before(r.sentAt.Add(c.p.Lease)) {
		return // a lease or more after the send: the engine may have dropped the request
	}
	w := chkAckWait{key: k, node: o.Node, toldAt: c.now, deadline: c.now.Add(2*c.p.AckDelay + AckSlack), row: row}
	c.ackp.waiting[k] = w
	c.ackp.queue = append(c.ackp.queue, w)
}

// ackGone ends k's wait: its row is gone or began another lifetime.
func (c *checker) ackGone(k chkKey) {
	delete(c.ackp.waiting, k)
	delete(c.ackp.owner, k)
	k.rowReq, k.hasRowReq = 0, false
}

// ackHeld notes that node holds k's row (a claim, or the leased enqueue
// that created it); the empty node releases it (a Fail).
func (c *checker) ackHeld(k chkKey, node string) {
	k.rowReq, k.hasRowReq = 0, false
	if node == "" {
		delete(c.ackp.owner, k)
		return
	}
	c.ackp.owner[k] = node
}

// ackExcuseNode drops node's waits and the rows it holds: it crashed or
// booted (a new incarnation does not know the leases of the last one,
// though they carry its name), or saw a store fault (an ambiguous claim or
// enqueue leaves rows leased to it that it never learned of).
func (c *checker) ackExcuseNode(node string) {
	for k, w := range c.ackp.waiting {
		if w.node == node {
			delete(c.ackp.waiting, k)
		}
	}
	for k, n := range c.ackp.owner {
		if n == node {
			delete(c.ackp.owner, k)
			k.rowReq, k.hasRowReq = 0, false
		}
	}
}

// ackDue judges the waits whose deadline has passed by now.
func (c *checker) ackDue(now time.Time) {
	q := c.ackp.queue
	i := 0
	for ; i < len(q) && q[i].deadline.Before(now); i++ {
		w := q[i]
		open, ok := c.ackp.waiting[w.key]
		if !ok || open.node != w.node || !open.toldAt.Equal(w.toldAt) {
			continue
		}
		delete(c.ackp.waiting, w.key)
		if row, stored := c.stored[w.key]; !stored || !row.Equal(w.row) {
			continue
		}
		c.report(InvAckedAfterDelivery, w.key.bot, w.key.event, chkOnce(w.key.bot, w.key.event)+"\x00ack-delay",
			"node %s was told of its 2xx at %s and the row was still in the queue %s later (ack delay %s, twice for clock drift, plus %s), with no crash, boot or store fault of the node to excuse it",
			w.node, w.toldAt.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.toldAt), c.p.AckDelay, AckSlack)
	}
	c.ackp.queue = q[i:]
}
