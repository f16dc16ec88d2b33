package oracle

import (
	"bytes"

	"github.com/deliverysim/deliverysim/impl"
)

// resume-from-cursor: a node that read the stored cursors (ObsCursorsRead)
// resumes each stream that had a stream cursor in that answer from exactly
// that cursor, in its first subscription of the stream afterwards
// (ObsSubscribe):
//
//   - log streams: from the cursor's position, with its sync cookie when it
//     has one; never a fresh sync;
//   - timestamp streams: from a created_at no earlier than the cursor's
//     minus the engine's declared lookback (TimestampLookback), and no
//     later than the cursor's.
//
// Starting later skips events the cursor says are still owed (a loss, which
// no-silent-loss also sees once an owed event is skipped); starting earlier
// replays what was already handed off, which costs every bot duplicates and
// the replay its throughput. Both are judged from what the store answered
// the node and what the node asked the upstream for, never from the
// engine's notes. Later subscriptions of the same stream in the same
// incarnation (a membership that starts behind the stream's head rewinds
// it on purpose) are not judged.
//
// A node that asks the upstream for a stream before its store has answered
// it the cursor listing in this incarnation cannot resume from the stream's
// cursor at all: if the store already held one (as written back to the
// checker, ObsCursor), the subscription is judged a violation too, whatever
// it asks for (a boot whose listing failed must wait for it: a membership
// that arrives meanwhile may not start the stream from the registry).
type resumeState struct {
	cursors map[string]impl.Cursor // stream -> its stream cursor as read
	judged  map[string]bool
}

func (c *checker) cursorsRead(o *Observation) {
	st := &resumeState{cursors: map[string]impl.Cursor{}, judged: map[string]bool{}}
	for _, cur := range o.Cursors {
		if cur.Key.Subscriber == "" {
			st.cursors[cur.Key.Stream] = cur
		}
	}
	if c.resume == nil {
		c.resume = map[string]*resumeState{}
	}
	c.resume[o.Node] = st
}

func (c *checker) subscribed(o *Observation) {
	st := c.resume[o.Node]
	if st == nil {
		if cur, ok := c.cursorLast[impl.CursorKey{Stream: o.Stream}]; ok {
			c.report(InvResumeFromCursor, "", "", "unread\x00"+o.Node+"\x00"+o.Stream,
				"node %s asked the upstream for %s before its store answered the cursor listing in this incarnation, while the store held the stream's cursor at %s: it cannot resume from a cursor it has not read",
				o.Node, o.Stream, chkPos(cur))
		}
		return
	}
	if st.judged[o.Stream] {
		return
	}
	st.judged[o.Stream] = true
	cur, ok := st.cursors[o.Stream]
	if !ok {
		return
	}
	switch {
	case o.Fresh:
		c.report(InvResumeFromCursor, "", "", "",
			"node %s read the durable cursor of %s at %s and then asked the upstream for a fresh sync, skipping everything after the cursor",
			o.Node, o.Stream, chkPos(cur.Pos))
	case o.LogStream:
		if o.Pos.Compare(cur.Pos) != 0 {
			c.report(InvResumeFromCursor, "", "", "",
				"node %s read the durable cursor of log stream %s at %s but resumed from %s (%s)",
				o.Node, o.Stream, chkPos(cur.Pos), chkPos(o.Pos), resumeSide(o.Pos.Compare(cur.Pos)))
		} else if len(cur.Token) > 0 && !bytes.Equal(o.Token, cur.Token) {
			c.report(InvResumeFromCursor, "", "", "",
				"node %s read the durable cursor of log stream %s with sync cookie %q but resumed with cookie %q",
				o.Node, o.Stream, cur.Token, o.Token)
		}
	default:
		lo := cur.Pos.Major - c.p.TimestampLookback.Milliseconds()
		if o.Since < lo || o.Since > cur.Pos.Major {
			side := 1
			if o.Since < lo {
				side = -1
			}
			c.report(InvResumeFromCursor, "", "", "",
				"node %s read the durable cursor of timestamp stream %s at created_at %d ms but resumed from %d ms, outside [%d, %d] (the cursor less the declared lookback %s, and the cursor) (%s)",
				o.Node, o.Stream, cur.Pos.Major, o.Since, lo, cur.Pos.Major, c.p.TimestampLookback, resumeSide(side))
		}
	}
}

func resumeSide(cmp int) string {
	if cmp < 0 {
		return "earlier: it replays what was already handed off"
	}
	return "later: it skips events the cursor says are still owed"
}
