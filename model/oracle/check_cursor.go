package oracle

import (
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// cursor checks a durable cursor read back after a write: it never moves
// backwards (cursor-monotonic), and on a log stream it is a low watermark:
// every obligation at or before it has been handed off durably — queued,
// answered with a 2xx, or dead-lettered — by the time it is durable
// (cursor-low-watermark).
//
// An obligation that a join created after the event had reached a node
// (a membership that starts behind the head, see backfilled) is exempt
// too: the cursor may have passed it before anyone owed it, and no
// cursor moves back. It is held to no-silent-loss and liveness.
//
// Timestamp streams are exempt from the watermark: producers' skewed clocks
// let an event with an older created_at arrive after the cursor passed it,
// which the engine covers with its replay lookback, not with the cursor.
// Those obligations are still held to no-silent-loss and liveness.
func (c *checker) cursor(o *Observation) {
	c.stats.CursorObservations++
	key, pos := o.Cursor.Key, o.Cursor.Pos
	if last, ok := c.cursorLast[key]; ok && pos.Compare(last) < 0 {
		c.report(InvCursorMonotonic, key.Subscriber, "", "",
			"durable cursor %s/%q moved backwards from %s to %s after a write by node %s",
			key.Stream, key.Subscriber, chkPos(last), chkPos(pos), o.Node)
	}
	c.cursorLast[key] = pos
	c.progressCursor(key.Stream, pos)

	evs := c.streamEvents[key.Stream]
	if len(evs) == 0 || !evs[0].log {
		return
	}
	i := c.cursorChecked[key]
	for ; i < len(evs) && evs[i].pos.Compare(pos) <= 0; i++ {
		e := evs[i]
		for _, bot := range c.bots {
			if key.Subscriber != "" && bot != key.Subscriber {
				continue
			}
			if !c.memberAt(e.stream, bot, e.pos) || c.key(bot, e.id).handoff {
				continue
			}
			if _, back := c.backfilled(e.stream, bot, e.pos); back {
				continue // owed only since a join that came after the event reached a node
			}
			c.report(InvCursorLowWatermark, bot, e.id, chkOnce(bot, e.id),
				"durable cursor %s/%q is at %s, past this event at %s, which was never queued, acknowledged or dead-lettered (written by node %s)",
				key.Stream, key.Subscriber, chkPos(pos), chkPos(e.pos), o.Node)
		}
	}
	c.cursorChecked[key] = i
}

// cursorKnown books what a node's store told it: cur's key is durable at
// or past cur.Pos (a read, or a conditional write answered with success).
func (c *checker) cursorKnown(node string, cur impl.Cursor) {
	k := c.known[node]
	if k == nil {
		k = map[impl.CursorKey]impl.Position{}
		c.known[node] = k
	}
	if old, ok := k[cur.Key]; !ok || cur.Pos.Compare(old) > 0 {
		k[cur.Key] = cur.Pos
	}
}

// cursorAsk is the request side of cursor-monotonic: a node never asks its
// store to write a cursor at or behind a position the store has already
// told it (in this incarnation) that cursor holds. Behind, it is a
// regression only the store's guard stops; at, a write that changes
// nothing. Another node's writes, which this node has not been told of,
// do not count.
func (c *checker) cursorAsk(o *Observation) {
	key, pos := o.Cursor.Key, o.Cursor.Pos
	known, ok := c.known[o.Node][key]
	if !ok || pos.Compare(known) > 0 {
		return
	}
	what := "behind"
	if pos.Compare(known) == 0 {
		what = "at"
	}
	c.report(InvCursorMonotonic, key.Subscriber, "", "",
		"node %s asked its store to write cursor %s/%q at %s, %s %s, which its store had already told it the cursor holds",
		o.Node, key.Stream, key.Subscriber, chkPos(pos), what, chkPos(known))
}

// cleanup checks one committed retention call (retention-bounds) against
// the cleaning node's clock — the clock the engine itself ages messages by —
// and, for what the TTL rule deleted, against true (virtual) time too:
//
//   - ttl: everything deleted was older than the TTL both by the cleaning
//     node's clock and by true time since its enqueue (a cleaner whose clock
//     runs ahead of the enqueuer's must not shorten the TTL), nothing deleted
//     was under an active lease, and nothing unleased older than the TTL
//     plus the engine's clock-skew budget remains;
//   - cap: no bot holds more than the cap unless every message above it is
//     leased, nothing leased was deleted, and everything deleted was older
//     than everything of the same bot that was kept.
func (c *checker) cleanup(o *Observation) {
	c.stats.Cleanups++
	now := o.Clock
	leased := func(m impl.Message) bool { return m.LeaseUntil.After(now) }
	enqueuedAt := map[chkKey]time.Time{}
	for _, m := range o.Deleted {
		k := c.key(m.Subscriber, m.EventID)
		if t, ok := c.stored[k]; ok {
			enqueuedAt[k] = t
			delete(c.stored, k)
		}
		c.ackLife(k) // a failure not yet written down may be, on a new row
		k.drops = append(k.drops, o.Time)
		if !k.hasDropped {
			k.dropped, k.hasDropped = o.Time, true
			c.stats.RetentionDropped++
		}
		if leased(m) {
			c.report(InvRetentionBounds, m.Subscriber, m.EventID, chkOnce(m.Subscriber, m.EventID),
				"%s cleanup by node %s deleted a message under an active lease (until %s, node clock %s)",
				o.Rule, o.Node, m.LeaseUntil.Format(chkTimeFormat), now.Format(chkTimeFormat))
		}
	}
	switch o.Rule {
	case "ttl":
		if n := c.nodes[o.Node]; n != nil {
			n.lastCleanup = o.Time
			c.cadenceDirty = true
		}
		// The store's half of the TTL rule: DeleteExpired removes what
		// was created before the cutoff it is given, never a message at
		// it or after (impl.Store). The engine's cutoff lies the skew
		// budget behind the TTL, so a store that deletes at its cutoff
		// inclusive shortens no TTL unless the budget is zero; judged
		// here, it fails wherever a message meets the cutoff exactly.
		if !o.Cutoff.IsZero() {
			for _, m := range o.Deleted {
				if !m.CreatedAt.Before(o.Cutoff) {
					c.report(InvRetentionBounds, m.Subscriber, m.EventID, chkOnce(m.Subscriber, m.EventID),
						"the TTL rule (node %s) deleted a message created at %s, not before the cutoff %s the store was given",
						o.Node, m.CreatedAt.Format(chkTimeFormat), o.Cutoff.Format(chkTimeFormat))
				}
			}
		}
		if c.p.RetentionTTL <= 0 {
			return
		}
		limit := now.Add(-c.p.RetentionTTL)
		for _, m := range o.Deleted {
			k := c.key(m.Subscriber, m.EventID)
			if !m.CreatedAt.Before(limit) {
				c.report(InvRetentionBounds, m.Subscriber, m.EventID, chkOnce(m.Subscriber, m.EventID),
					"the TTL rule (node %s, clock %s) deleted a message created at %s, younger than the TTL %s",
					o.Node, now.Format(chkTimeFormat), m.CreatedAt.Format(chkTimeFormat), c.p.RetentionTTL)
			} else if t, ok := enqueuedAt[k]; ok && o.Time.Sub(t) < c.p.RetentionTTL {
				c.report(InvRetentionBounds, m.Subscriber, m.EventID, chkOnce(m.Subscriber, m.EventID),
					"the TTL rule (node %s) deleted a message only %s after it was enqueued, younger than the TTL %s: clock skew shortened the TTL",
					o.Node, o.Time.Sub(t), c.p.RetentionTTL)
			}
		}
		keep := now.Add(-c.p.RetentionTTL - c.p.ClockSkewBudget)
		for _, m := range o.Remaining {
			if m.CreatedAt.Before(keep) && !leased(m) {
				c.report(InvRetentionBounds, m.Subscriber, m.EventID, chkOnce(m.Subscriber, m.EventID),
					"after a TTL cleanup by node %s (clock %s) a message created at %s, older than the TTL %s plus the skew budget %s, remains",
					o.Node, now.Format(chkTimeFormat), m.CreatedAt.Format(chkTimeFormat), c.p.RetentionTTL, c.p.ClockSkewBudget)
			}
		}
	case "cap":
		max := c.p.RetentionMax
		if max <= 0 {
			return
		}
		count := map[string]int{}
		unleased := map[string][]int{} // indexes into o.Remaining, in its order
		for i := range o.Remaining {
			m := &o.Remaining[i]
			count[m.Subscriber]++
			if !leased(*m) {
				unleased[m.Subscriber] = append(unleased[m.Subscriber], i)
			}
		}
		for _, bot := range chkSortedStrings(count) {
			if count[bot] > max && len(unleased[bot]) > 0 {
				c.report(InvRetentionBounds, bot, "", "",
					"after a cap cleanup by node %s the bot holds %d messages (%d unleased), above the cap %d",
					o.Node, count[bot], len(unleased[bot]), max)
			}
		}
		for _, d := range o.Deleted {
			for _, ki := range unleased[d.Subscriber] {
				if kept := &o.Remaining[ki]; chkOlder(*kept, d) {
					c.report(InvRetentionBounds, d.Subscriber, d.EventID, chkOnce(d.Subscriber, d.EventID),
						"the cap rule (node %s) trimmed this message (created %s) but kept the older %s (created %s)",
						o.Node, d.CreatedAt.Format(chkTimeFormat), kept.EventID, kept.CreatedAt.Format(chkTimeFormat))
					break
				}
			}
		}
	}
}

// chkOlder orders by (CreatedAt, EventID), the trim order of the contract.
func chkOlder(a, b impl.Message) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.EventID < b.EventID
}

// checkCleanupCadence flags a node that has been up for more than two
// cleanup intervals (plus slack) without attempting a TTL cleanup: a
// stopped cleaner lets backlogs grow without bound (retention-bounds).
func (c *checker) checkCleanupCadence() {
	if c.p.CleanupInterval <= 0 {
		return
	}
	if !c.cadenceDirty && (c.cadenceNone || !c.now.After(c.cadenceDue)) {
		return // no node's limit has passed: the loop below would flag none
	}
	limit := 2*c.p.CleanupInterval + c.p.CleanupSlack
	c.cadenceDirty, c.cadenceNone = false, true
	for i, n := range c.nodeList {
		name := c.nodeNames[i]
		if !n.up || n.flagged {
			continue
		}
		if c.now.Sub(n.lastCleanup) <= limit {
			if due := n.lastCleanup.Add(limit); c.cadenceNone || due.Before(c.cadenceDue) {
				c.cadenceDue, c.cadenceNone = due, false
			}
			continue
		}
		n.flagged = true
		c.report(InvRetentionBounds, "", "", "",
			"node %s has run %s since its last retention cleanup (boot or cleanup at %s); the cleaner must run every %s",
			name, c.now.Sub(n.lastCleanup), n.lastCleanup.Format(chkTimeFormat), c.p.CleanupInterval)
	}
}

const chkTimeFormat = "2006-01-02T15:04:05.000Z07:00"
