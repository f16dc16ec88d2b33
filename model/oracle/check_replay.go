package oracle

import "time"

// The durable half of idempotent-replay (SPEC invariant 4: replaying input
// that was already processed changes no durable state). A node that has
// handed (bot, event) off in its current incarnation — its enqueue of the
// row committed, or a request it sent with no row was answered 2xx (a row
// it claimed from an earlier incarnation's queue does not count: that was
// not its hand-off) — and is handed the
// event again (a duplicated or replayed upstream batch) must recognise it:
// it may not insert a new row for it once the old one is gone, nor send it
// again without a row. Within one incarnation the engine has everything it
// needs to know; across a crash only the durable cursor speaks for it
// (resume-from-cursor).
//
// The check stands back where a new hand-off is legitimate or the node may
// not know it already handed the event off:
//   - the registry changed the stream's memberships since (a membership
//     that starts behind the head is owed a replay);
//   - the node's store answered it with a fault since (an ambiguous
//     enqueue committed although the node was told it failed);
//   - on a timestamp stream, the event's created_at lies more than the
//     declared lookback behind the newest one the node had handed off:
//     a replay never reaches that far back, so an engine may forget
//     those ids.
type chkHanded struct {
	downs int
	at    time.Time
}

type chkNodeStream struct{ node, stream string }

// replayed judges a new hand-off by node of k (a new queue row, or a
// request with no row): a repeat of a hand-off the node made in this
// incarnation is a replay that changed durable state, and is reported.
func (c *checker) replayed(node string, k chkKey, what string) {
	e := c.events[k.event]
	if e == nil {
		return
	}
	downs := c.node(node).downs
	prev, ok := c.handedBy[chkNodeKey{node, k}]
	if ok && prev.downs == downs && !c.replayExempt(node, e, prev.at, downs) {
		c.report(InvIdempotentReplay, k.bot, k.event, chkOnce(k.bot, k.event),
			"node %s handed this event (at %s) off again in the same incarnation, as %s, after it had handed it off at %s with no membership change or store fault since: a replayed or duplicated upstream delivery changed durable state",
			node, chkPos(e.pos), what, prev.at.UTC().Format(time.RFC3339Nano))
	}
}

// bookHandOff records that node handed k off (a committed row, or a 2xx
// for a request), and on a timestamp stream the newest created_at it has
// handed off in this incarnation.
func (c *checker) bookHandOff(node string, k chkKey) {
	e := c.events[k.event]
	if e == nil {
		return
	}
	downs := c.node(node).downs
	c.handedBy[chkNodeKey{node, k}] = chkHanded{downs: downs, at: c.now}
	if e.log {
		return
	}
	ns := chkNodeStream{node, e.stream}
	if hs, ok := c.tsHanded[ns]; !ok || hs.downs != downs || e.pos.Major > hs.major {
		c.tsHanded[ns] = chkTSHigh{downs: downs, major: e.pos.Major}
	}
}

type chkTSHigh struct {
	downs int
	major int64
}

func (c *checker) isStored(k chkKey) bool {
	_, ok := c.stored[k]
	return ok
}

func (c *checker) replayExempt(node string, e *chkEvent, since time.Time, downs int) bool {
	if t, ok := c.membChanged[e.stream]; ok && !t.Before(since) {
		return true
	}
	if t, ok := c.storeFaultAt[node]; ok && !t.Before(since) {
		return true
	}
	if !e.log {
		hs := c.tsHanded[chkNodeStream{node, e.stream}]
		if hs.downs == downs && e.pos.Major < hs.major-c.p.TimestampLookback.Milliseconds() {
			return true
		}
	}
	return false
}
