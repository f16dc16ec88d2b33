package oracle

import (
	"slices"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// retry-backoff at boot: a message already due when a node boots is sent
// promptly, not at the next housekeeping pass. After a node's first
// successful listing of the queue in an incarnation (ObsQueueRead), the
// head of each bot's due rows (live, due by the node's clock, no active
// lease, first in queue order) is sent by some node within StoreRetry (a
// failed claim is retried after it) plus HOLBound plus the nodes' clock
// spread, or its row resolves (acked, dead, deleted). Retry promptness
// (check_prompt.go) excuses any wait that spans a crash or a boot, and the
// housekeeping sweep picks skipped rows up within the liveness bound, so
// without this an engine that ignores due rows at boot is not caught.
//
// Excused: the node crashed in the window, or its store answered it with a
// fault (the claim may be retried many times); the bot had not published
// its key at the listing (the engine sends nothing to it); a node's breaker
// for the bot was not closed at the listing or left the closed state in the
// window (as retry promptness follows it).
type chkBootPrompt struct {
	queue   []*chkBootWait // in listing order: deadlines are ordered
	waiting map[chkKey]*chkBootWait
	read    map[string]int // node -> incarnation (downs) whose listing started waits
}

type chkBootWait struct {
	key      chkKey
	node     string
	downs    int
	at       time.Time
	deadline time.Time
}

// bootQueueRead starts the waits of a node's first listing in an
// incarnation.
func (c *checker) bootQueueRead(o *Observation) {
	downs := c.node(o.Node).downs
	if d, ok := c.boot.read[o.Node]; ok && d == downs {
		return
	}
	c.boot.read[o.Node] = downs
	now := o.Clock
	if now.IsZero() {
		now = c.now
	}
	msgs := slices.Clone(o.Messages)
	slices.SortStableFunc(msgs, impl.QueueCompare)
	spread := time.Duration(0)
	if c.anyOffset {
		spread = c.maxOffset - c.minOffset
	}
	window := c.p.StoreRetry + c.p.HOLBound + spread + 10*time.Second
	head := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		if m.Dead || head[m.Subscriber] || m.NextAttemptAt.After(now) || m.LeaseUntil.After(now) ||
			slices.Contains(o.Keyless, m.Subscriber) {
			continue
		}
		head[m.Subscriber] = true
		if c.breakerNotClosed(m.Subscriber) {
			continue // a breaker defers it (seed 5652: opened just before the listing)
		}
		k := c.key(m.Subscriber, m.EventID)
		w := &chkBootWait{key: k, node: o.Node, downs: downs, at: c.now, deadline: c.now.Add(window)}
		c.boot.waiting[k] = w
		c.boot.queue = append(c.boot.queue, w)
	}
}

// bootDue judges the waits whose deadline passed.
func (c *checker) bootDue(now time.Time) {
	q := c.boot.queue
	i := 0
	for ; i < len(q) && q[i].deadline.Before(now); i++ {
		w := q[i]
		if c.boot.waiting[w.key] != w {
			continue // sent, or a later wait took over
		}
		delete(c.boot.waiting, w.key)
		if _, live := c.stored[w.key]; !live {
			continue
		}
		if w.key.isDead {
			continue
		}
		if c.node(w.node).downs != w.downs {
			continue
		}
		if t, ok := c.storeFaultAt[w.node]; ok && !t.Before(w.at) {
			continue
		}
		if t, ok := c.prompt.breakerAt[w.key.bot]; ok && !t.Before(w.at) {
			continue
		}
		c.report(InvRetryBackoff, w.key.bot, w.key.event, chkOnce(w.key.bot, w.key.event)+"\x00boot",
			"it was due, unleased and first of its bot's due rows when node %s listed the queue after booting at %s, and no node sent it within %s (the store-retry interval %s plus the head-of-line bound %s and the nodes' clock spread), with no crash, store fault or breaker to excuse it",
			w.node, w.at.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.at), c.p.StoreRetry, c.p.HOLBound)
	}
	c.boot.queue = q[i:]
}

// breakerNotClosed: some node's breaker for bot is not closed, as the
// breaker-policy check follows it.
func (c *checker) breakerNotClosed(bot string) bool {
	for nb, b := range c.breakers {
		if nb.bot.name == bot && b.state != chkBrClosed {
			return true
		}
	}
	return false
}
