package oracle

import (
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

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
// (resume-from-cursor, and behindBootCursor below).
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
//     those ids;
//   - once per such membership: a bot joined the stream after the event
//     was produced, from a position before the event's (a late join,
//     lateJoinExcuse), even if the join came before the earlier hand-off.
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
	prev, ok := c.handedBy[c.nk(node, k)]
	if !ok || prev.downs != downs {
		c.behindBootCursor(node, k, e, what)
		return
	}
	if !c.replayExempt(node, e, prev.at, downs) && !c.lateJoinExcuse(lateReplay, node, k, e) {
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
	c.handedBy[c.nk(node, k)] = chkHanded{downs: c.node(node).downs, at: c.now}
	if !e.log {
		c.raiseTSHanded(node, e.stream, e.pos.Major)
	}
}

// raiseTSHanded moves node's newest handed-off created_at on a timestamp
// stream up to major (a new incarnation starts over).
func (c *checker) raiseTSHanded(node, stream string, major int64) {
	downs := c.node(node).downs
	ns := chkNodeStream{node, stream}
	if hs, ok := c.tsHanded[ns]; !ok || hs.downs != downs || major > hs.major {
		c.tsHanded[ns] = chkTSHigh{downs: downs, major: major}
	}
}

// replayCursor: a node's committed cursor of a timestamp stream is as far
// as it says it has handed the stream off, events no bot was owed included
// (they make no row to book): the lookback exemption counts from there
// (seed 20950: after events without members had moved the cursor 20
// minutes past the last row, a duplicate batch 21 minutes behind it, whose
// id the engine had forgotten, was handed off again).
func (c *checker) replayCursor(o *Observation) {
	key := o.Cursor.Key
	if key.Subscriber != "" || o.Node == "" {
		return
	}
	evs := c.streamEvents[key.Stream]
	if len(evs) > 0 && !evs[0].log {
		c.raiseTSHanded(o.Node, key.Stream, o.Cursor.Pos.Major)
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

// Across a crash the durable cursor speaks for what was handed off: it is
// a low watermark (cursor-low-watermark), so every event of a log stream at
// or behind the cursor a node read at boot was handed off durably, by this
// node's earlier incarnation or by another node. A node that hands such an
// event off again (a new queue row, or a request with no row: a duplicated
// upstream batch, a subscription that starts at the cursor's own event)
// replays processed input into durable state, which the same-incarnation
// rule above cannot see. Excused as above (a membership change of the
// stream or a store fault of the node since the read), and for a bot that
// joined the stream while it was running: a join can be owed events behind
// the cursor (a backfill), and an engine that cannot tell from its durable
// state whether a join's backfill finished before a crash replays it again,
// which costs duplicates only.
type chkBootRead struct {
	at      time.Time
	downs   int
	cursors map[string]impl.Position // log and timestamp streams alike; judged on log streams
}

func (c *checker) replayBootRead(o *Observation) {
	br := chkBootRead{at: c.now, downs: c.node(o.Node).downs, cursors: map[string]impl.Position{}}
	for _, cur := range o.Cursors {
		if cur.Key.Subscriber == "" {
			br.cursors[cur.Key.Stream] = cur.Pos
		}
	}
	c.bootRead[o.Node] = br
}

// replayMembership notes a bot that joins a stream after the stream's
// first event.
func (c *checker) replayMembership(o *Observation) {
	if o.Member && len(c.streamEvents[o.Stream]) > 0 {
		c.key(o.Bot, o.Stream).joinedLate = true
	}
}

// behindBootCursor judges a new hand-off by node of k against the cursor
// the node read at boot.
func (c *checker) behindBootCursor(node string, k chkKey, e *chkEvent, what string) {
	if !e.log {
		return
	}
	br, ok := c.bootRead[node]
	if !ok || br.downs != c.node(node).downs {
		return
	}
	cur, ok := br.cursors[e.stream]
	if !ok || e.pos.Compare(cur) > 0 || c.replayExempt(node, e, br.at, br.downs) {
		return
	}
	if c.key(k.bot, e.stream).joinedLate {
		return
	}
	c.report(InvIdempotentReplay, k.bot, k.event, chkOnce(k.bot, k.event)+"\x00boot-cursor",
		"node %s handed this event (at %s) off again as %s, though the durable cursor it read at boot (%s) says it was handed off already, with no membership change or store fault since",
		node, chkPos(e.pos), what, chkPos(cur))
}

// A late join. A membership registered after an event was produced, from a
// position before it, makes the event owed to the new member: the node must
// hand it off again (a replay of the stream from the membership's start, the
// backfill). Where the membership change came after the node's earlier
// hand-off, replayExempt and resendExcused already stand back. But a real
// node learns of a registry change some time after it is made (its registry
// poll answers, and it applies the answer between the other work it has):
// meanwhile it may hand off, under the memberships the event was produced
// with, an event it will replay once it applies the join. The simulator
// tells every live node of a change in the step that makes it, so there the
// gap is empty; deliverysim chaos runs a real process, and saw it (seed 11:
// the join at 8 s fell inside a database stall, the engine handed the
// stalled events off when the stall ended and applied the join after it,
// then replayed from the join's start an event produced 20 ms before the
// join with a created_at after it).
//
// The excuse is judged from the world alone (the event's production, the
// registry's change, the node's hand-offs), and it is spent: each late join
// excuses one more hand-off of each (bot, event) per node and incarnation,
// for each check, so an engine that keeps handing such an event off is
// still caught. Events produced after the join, and events at or before
// its start, never get it.
type lateCheck uint8

const (
	lateReplay lateCheck = iota // idempotent-replay (replayed)
	lateResend                  // resend-with-cause (resendSend)
)

type chkLateKey struct {
	check lateCheck
	nk    chkNodeKey
}

// chkLateUse: the memberships of the event's stream (a count, in registry
// order) already looked at for a node's hand-offs of a message, in
// incarnation downs.
type chkLateUse struct {
	downs int
	spent int
}

// lateJoinExcuse reports whether a late join of e's stream that this check
// has not yet spent on node's hand-offs of k excuses the hand-off now, and
// spends it. Both checks ask only once a membership change after the
// earlier hand-off has not excused it, so every join of the stream came
// before that hand-off.
func (c *checker) lateJoinExcuse(check lateCheck, node string, k chkKey, e *chkEvent) bool {
	lk := chkLateKey{check, c.nk(node, k)}
	downs := c.node(node).downs
	use := c.lateJoin[lk]
	if use.downs != downs {
		use = chkLateUse{downs: downs}
	}
	ms := c.memb[e.stream]
	for i := use.spent; i < len(ms); i++ {
		j := ms[i]
		if !j.member || j.step <= e.step || j.from.Compare(e.pos) >= 0 {
			continue
		}
		c.lateJoin[lk] = chkLateUse{downs: downs, spent: i + 1}
		return true
	}
	return false
}

// recordsDirect says whether a new queue row of k by node may be the node
// recording the failure of a request it sent with no row: one it was told
// failed in this very step, or one whose outcome it was never told (an
// engine gives such a request up after a lease and queues the message to
// retry it). That is the engine retrying its own send, not a replay of
// upstream input, even when the message was handed off again since (a
// backfilling join's replay queued and delivered it meanwhile: seed 28
// with the corner classes off).
func (c *checker) recordsDirect(node string, k chkKey) bool {
	nk := c.nk(node, k)
	if nk.openDirect > 0 {
		return true
	}
	step, ok := nk.directFailed, nk.hasDirectFailed
	return ok && step == c.step
}
