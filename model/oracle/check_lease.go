package oracle

import (
	"slices"
	"time"
)

// Leases against requests in flight (bounded-retry's premise: one
// message, one holder). A node sends a message from a row it holds under a
// lease: one its Claim took, or one its leased enqueue inserted. While that
// request is still on the wire (no outcome has ended it at the bot's end,
// ObsWire), no other node may send the message from a lease it was granted
// before the first lease ran out: the engine's documented lease
// (Config.Lease, which must exceed the webhook timeout), counted from when
// the store granted it by the store's clock (the Now of the claim, the
// CreatedAt of the leased insert). A hung request that answers late
// (webhook-late: ObsWire lost with Late at the timeout, then
// ObsLateAnswer) is on the wire until that answer: it outlives its lease
// legitimately, and another node's claim after the lease ran out is no
// violation; an engine whose leases are shorter than its requests live
// (two nodes with one message in flight at once) is.
// Requests sent with no lease (direct hand-offs) are not judged, nor a
// request whose row is gone (its lease went with it).
type chkLeases struct {
	// grant: a lease a node was granted on a message in the current step
	// (a claim, a leased insert), waiting for the send it is for.
	grant map[chkNodeKey]chkGrant
	// wire (chkState.wire): per message, its requests from a lease still
	// on the wire.
}

type chkGrant struct {
	at   time.Time // by the store's clock
	step int64
}

type chkWireReq struct {
	req  int64
	node string
	at   time.Time // its lease's grant
	// hung: the node was told nothing by the timeout and the request is
	// still on the wire (webhook-late); life is the lifetime it was sent
	// in, which the lost outcome made the checker forget (reqLife).
	hung bool
	life int
	// orphaned: its node crashed since, and a Fail of the message has
	// committed after that (released its lease).
	orphaned bool
}

func newLeases() chkLeases {
	return chkLeases{grant: map[chkNodeKey]chkGrant{}}
}

// leaseGranted books a lease granted to node on k at at (store clock).
func (c *checker) leaseGranted(node string, k chkKey, at time.Time) {
	if node == "" || at.IsZero() {
		return
	}
	c.leases.grant[c.nk(node, k)] = chkGrant{at: at, step: c.step}
}

// leaseSend judges a send: if it is made under a lease granted in this
// step, every other node's request of the message still on the wire must
// have been sent under a lease that had run out when this one was granted.
func (c *checker) leaseSend(o *Observation, k chkKey) {
	nk := c.nk(o.Node, k)
	g, ok := c.leases.grant[nk]
	if !ok {
		return
	}
	delete(c.leases.grant, nk)
	if g.step != c.step {
		return
	}
	c.rq(o.Request).leased = true
	l := k.life
	for _, w := range k.wire {
		if w.node == o.Node || w.orphaned || !g.at.Before(w.at.Add(c.p.Lease)) {
			continue
		}
		life := c.rq(w.req).life
		if w.hung {
			life = w.life
		}
		if l == nil || life != l.id {
			continue // its row is gone (acked, trimmed, requeued): so is its lease
		}
		c.report(InvBoundedRetry, k.bot, k.event, chkOnce(k.bot, k.event)+"\x00two-leases",
			"node %s sent it under a lease granted at %s while node %s's request %d of it, sent under a lease granted at %s, was still in flight and that lease (%s) had not run out by the store's clock",
			o.Node, g.at.UTC().Format(time.RFC3339Nano), w.node, w.req, w.at.UTC().Format(time.RFC3339Nano), c.p.Lease)
		break
	}
	k.wire = append(k.wire, chkWireReq{req: o.Request, node: o.Node, at: g.at})
}

// leaseHung: request o.Request's node will not be told its outcome, but
// the request stays on the wire until its late answer (ObsLateAnswer),
// and its row's lease stays what it was.
func (c *checker) leaseHung(o *Observation) {
	ws := c.key(o.Bot, o.EventID).wire
	if i := slices.IndexFunc(ws, func(w chkWireReq) bool { return w.req == o.Request }); i >= 0 {
		ws[i].hung, ws[i].life = true, c.rq(o.Request).life
	}
}

// leaseFailed: a Fail of the message committed, which releases its lease.
// A request whose sending incarnation has crashed no longer holds the
// message: nothing can record its outcome, and a later incarnation of the
// node, holding the lease under the same owner name without knowing of
// that request, may record another failure and release the lease (seed
// 435 under a 10-minute lease). A live node that releases the lease of a
// request it still has in flight is judged (seeds 781 and 1952).
func (c *checker) leaseFailed(o *Observation) {
	ws := c.key(o.Bot, o.EventID).wire
	for i, w := range ws {
		if !c.alive(w.req) {
			ws[i].orphaned = true
		}
	}
}

// leaseWireEnd: request o.Request ended on the wire.
func (c *checker) leaseWireEnd(o *Observation) {
	k := c.key(o.Bot, o.EventID)
	ws := k.wire
	if i := slices.IndexFunc(ws, func(w chkWireReq) bool { return w.req == o.Request }); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		ws = nil
	}
	k.wire = ws
}
