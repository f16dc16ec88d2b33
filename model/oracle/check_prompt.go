package oracle

import (
	"slices"
	"time"
)

// retry-backoff, upper side: a failed message is retried once its backoff
// is over, not whenever the engine next happens to look. After a committed
// Fail leaves the row live (ObsFailed), some node must send the message
// again by the failure plus the longest backoff the policy allows
// (MaxBackoff with its jitter), plus HOLBound, plus the spread of the
// nodes' clocks. Missing that only slows a retry down, so no other
// invariant sees it until the liveness bound, far later.
//
// The check stands back wherever a slower retry is the policy's, not the
// engine's, doing: a node crashed or booted, or a store fault struck any
// node, in the window; the bot had another row queued before this one at
// the failure (it waits its turn in queue order); or nodes were told of
// BreakerFailures or more failures of the bot from BreakerOpenFor before
// the failure to the deadline, or a node's breaker for the bot was not
// closed at the failure or left the closed state since, as the
// breaker-policy check follows it (a breaker defers sends). When the wait
// starts with every request slot of a node for the bot held by requests
// still unanswered, or every slot is taken so before its deadline (a
// request sent after the failure, while the retry waits for its backoff,
// takes the last one: seeds 70885 and 173985), the window grows by a
// lease and a cleanup interval: if those never answer, the engine frees
// the slots only by giving them up. The wait ends with a send of the
// message, or when its row is resolved (acked, dead or trimmed). A
// requeued dead letter is due at once and waits the same way.
type chkRetryWait struct {
	key      chkKey
	failAt   time.Time
	deadline time.Time
	requeue  bool   // waits for the row to be made live, not for a send
	node     string // requeue: the node asked
	lost     bool   // began with a request whose answer never reached its node
	grown    bool   // its window already holds the time to give requests up
}

type chkPrompt struct {
	queue   []chkRetryWait         // in failure order, so deadlines are ordered
	waiting map[chkKey]time.Time   // key -> the failure it waits on
	asked   map[chkKey]time.Time   // key -> the operator's requeue request it waits on
	fails   map[string][]time.Time // per bot, failures told to nodes
	// breakerAt: per bot, the last time a node's breaker for it left the
	// closed state or the breaker check lost track of it (breakerStep).
	breakerAt map[string]time.Time
	// fullAt: per bot, the last time a send took the last request slot a
	// node has for it (in-flight-limit's books).
	fullAt map[string]time.Time
}

func (c *checker) promptWindow() time.Duration {
	maxWait := c.jitterTop(c.p.MaxBackoff)
	spread := time.Duration(0)
	if c.anyOffset {
		spread = c.maxOffset - c.minOffset
	}
	return maxWait + c.p.HOLBound + spread + 10*time.Second
}

// promptFailed starts the wait for a retry of k after a committed Fail
// left its row live (or a requeue made it live again).
func (c *checker) promptFailed(k chkKey) {
	if _, ok := c.stored[k]; ok {
		c.promptWait(k, 0, false)
	}
}

// promptLost starts the wait for k after a request of it, sent by a node
// incarnation still up, ended with no answer the node will ever be told
// (OutcomeLost): the engine must give up on it by itself, within a lease
// and a cleanup interval (engine.Config.Lease: "queue lease"; the
// housekeeping that expires requests runs every CleanupInterval), and
// then send it again as a due retry, or record it as a failed attempt.
// Until the deadline the message may not be sent at all: that is what
// the window is for.
func (c *checker) promptLost(k chkKey) {
	c.promptWait(k, c.giveUpBound(), true)
}

// promptWait starts a wait for k whose window is promptWindow plus extra.
// lost: the wait began with an unanswered request, and an older row of
// the bot is looked for again at the deadline (the message may have no
// row yet; its row, once written, waits its turn behind those).
func (c *checker) promptWait(k chkKey, extra time.Duration, lost bool) {
	if c.p.MaxBackoff <= 0 {
		return
	}
	for nb, b := range c.breakers {
		if nb.bot.name == k.bot && b.state != chkBrClosed {
			delete(c.prompt.waiting, k)
			return // a breaker not closed defers it
		}
	}
	if c.olderRow(k) {
		delete(c.prompt.waiting, k)
		return // an older row of the bot is served first
	}
	grown := extra > 0
	if c.slotsHeld(k.bot) {
		// Every request slot of a node for the bot is taken by requests
		// it has not been told the end of: if they never answer, the
		// engine frees the slots only when it gives them up, as for a
		// lost request of this message (seed 4533: eight hung requests,
		// then the operator requeued dead letters of the bot).
		extra = max(extra, c.giveUpBound())
		grown = true
	}
	c.prompt.waiting[k] = c.now
	c.promptQueue(chkRetryWait{key: k, failAt: c.now, deadline: c.now.Add(c.promptWindow() + extra), lost: lost, grown: grown})
}

// promptQueue adds w to the waits, keeping deadlines ordered: a longer
// window may end after later ones.
func (c *checker) promptQueue(w chkRetryWait) {
	c.prompt.queue = append(c.prompt.queue, w)
	q := c.prompt.queue
	for i := len(q) - 1; i > 0 && q[i].deadline.Before(q[i-1].deadline); i-- {
		q[i], q[i-1] = q[i-1], q[i]
	}
}

// giveUpBound is how long an engine may take to give up what it holds
// without an answer (a request, a leased row): a lease, then the periodic
// sweep that expires it.
func (c *checker) giveUpBound() time.Duration { return c.p.Lease + c.p.CleanupInterval }

// slotsHeld: some node has MaxInFlightPerBot requests to bot open, none of
// them answered to it (in-flight-limit's books, with the requests whose
// message was sent again since: the engine may hold their slots until it
// gives them up), and none older than a lease and a cleanup interval, by
// when the engine must have given it up.
func (c *checker) slotsHeld(bot string) bool {
	if c.p.MaxInFlightPerBot <= 0 {
		return false
	}
	for nb, s := range c.inflight.open {
		if nb.bot.name != bot {
			continue
		}
		n := 0
		for _, r := range s.reqs {
			if c.now.Before(r.at.Add(c.giveUpBound())) {
				n++
			}
		}
		if n >= c.p.MaxInFlightPerBot {
			return true
		}
	}
	return false
}

// promptSlotsFull notes that a send took the last request slot a node has
// for bot (n requests open to it, as slotsHeld counts them).
func (c *checker) promptSlotsFull(bot string, n int) {
	if c.p.MaxInFlightPerBot > 0 && n >= c.p.MaxInFlightPerBot {
		c.prompt.fullAt[bot] = c.now
	}
}

// olderRow: the bot has a live row stored before k's (any row, if k has
// none).
func (c *checker) olderRow(k chkKey) bool {
	at, ok := c.stored[k]
	for other, t := range c.stored {
		if other.bot == k.bot && other != k && (!ok || t.Before(at)) {
			return true
		}
	}
	return false
}

// promptResolved ends k's wait: it was sent again, or its row resolved.
func (c *checker) promptResolved(k chkKey) { delete(c.prompt.waiting, k) }

// promptRequeueAsked starts the wait for the operator's requeue of a dead
// letter (ObsRequeueAsked): the node must make the row live again within
// the same window. The operator's request is the engine's input, so an
// engine that drops it leaves a dead letter the operator asked to revive
// (SPEC: "a dead letter can be requeued").
func (c *checker) promptRequeueAsked(node string, k chkKey) {
	if !k.isDead {
		return
	}
	c.prompt.asked[k] = c.now
	c.prompt.queue = append(c.prompt.queue, chkRetryWait{key: k, failAt: c.now, deadline: c.now.Add(c.promptWindow()), requeue: true, node: node})
}

// promptRequeued ends a requeue wait (the row is live again, or gone).
func (c *checker) promptRequeued(k chkKey) { delete(c.prompt.asked, k) }

// promptExcuseAll drops every wait: a crash, a boot or a store fault can
// delay any retry.
func (c *checker) promptExcuseAll() {
	clear(c.prompt.waiting)
	clear(c.prompt.asked)
}

// breakerStep runs one breaker-policy step for o (breakerSend for a send,
// else breakerResult; not a func parameter, which would make every
// observation escape to the heap) and notes when it takes o.Bot's breaker on o.Node out of
// the closed state, or loses track of it: a wait starts only while every
// breaker of its bot is closed (promptFailed), so any deferral by a
// breaker within it begins with such a move.
func (c *checker) breakerStep(o *Observation, send bool) {
	o = c.unstep(o) // clock waits of one node (check_clockjump.go)
	if !c.breakerJudged() || o.Clock.IsZero() || o.Node == "" {
		return // neither judges it: no breaker changes
	}
	b := c.breakerOf(o.Node, o.Bot) // a new one is closed, as no breaker was
	was := b.state == chkBrClosed
	if send {
		c.breakerSend(o, b)
	} else {
		c.breakerResult(o, b)
	}
	if was && b.state != chkBrClosed {
		c.prompt.breakerAt[o.Bot] = c.now
	}
}

// promptRowGone ends both waits of k: its row was acked or trimmed.
func (c *checker) promptRowGone(k chkKey) {
	c.promptResolved(k)
	c.promptRequeued(k)
}

func (c *checker) promptFailure(bot string) {
	c.prompt.fails[bot] = append(c.prompt.fails[bot], c.now)
}

// promptDue judges the waits whose deadline has passed by now.
func (c *checker) promptDue(now time.Time) {
	q := c.prompt.queue
	i := 0
	var regrown []chkRetryWait
	for ; i < len(q) && q[i].deadline.Before(now); i++ {
		w := q[i]
		if w.requeue {
			if at, ok := c.prompt.asked[w.key]; ok && at.Equal(w.failAt) {
				delete(c.prompt.asked, w.key)
				c.report(InvRetryBackoff, w.key.bot, w.key.event, chkOnce(w.key.bot, w.key.event)+"\x00requeue",
					"the operator asked node %s to requeue this dead letter at %s and it was still dead %s later, with no crash or store fault to excuse it",
					w.node, w.failAt.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.failAt))
			}
			continue
		}
		if at, ok := c.prompt.waiting[w.key]; !ok || !at.Equal(w.failAt) {
			continue
		}
		if t, ok := c.prompt.fullAt[w.key.bot]; ok && !w.grown && !t.Before(w.failAt) {
			// Every slot of a node for the bot was taken within the
			// window: the wait is judged as if it had begun so.
			w.grown = true
			w.deadline = w.deadline.Add(c.giveUpBound())
			regrown = append(regrown, w)
			continue
		}
		delete(c.prompt.waiting, w.key)
		fails := c.prompt.fails[w.key.bot]
		from := w.failAt.Add(-c.p.BreakerOpenFor - time.Nanosecond)
		lo, _ := slices.BinarySearchFunc(fails, from, func(t, x time.Time) int { return t.Compare(x) })
		hi, _ := slices.BinarySearchFunc(fails, w.deadline.Add(time.Nanosecond), func(t, x time.Time) int { return t.Compare(x) })
		if c.p.BreakerFailures > 0 && hi-lo >= c.p.BreakerFailures {
			continue
		}
		if t, ok := c.prompt.breakerAt[w.key.bot]; ok && !t.Before(w.failAt) {
			continue // a breaker opened in the window
		}
		if w.lost {
			if c.olderRow(w.key) {
				continue
			}
			c.report(InvRetryBackoff, w.key.bot, w.key.event, chkOnce(w.key.bot, w.key.event)+"\x00lost",
				"a request of it ended at %s with no answer its node will ever be told (the connection hung, or the answer was lost), the node stayed up, and no node sent it again within %s (a lease %s and a cleanup interval %s for the engine to give up on the request, plus the longest backoff %s with jitter, the head-of-line bound %s and the nodes' clock spread), with no crash, store fault, older row of the bot or run of bot failures to excuse it",
				w.failAt.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.failAt), c.p.Lease, c.p.CleanupInterval, c.p.MaxBackoff, c.p.HOLBound)
			continue
		}
		c.report(InvRetryBackoff, w.key.bot, w.key.event, chkOnce(w.key.bot, w.key.event)+"\x00late",
			"its failure was recorded at %s with the row still live, and no node sent it again within %s (the longest backoff %s with jitter, plus the head-of-line bound %s and the nodes' clock spread), with no crash, store fault, older row of the bot or run of bot failures to excuse it",
			w.failAt.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.failAt), c.p.MaxBackoff, c.p.HOLBound)
	}
	c.prompt.queue = q[i:]
	for _, w := range regrown {
		c.promptQueue(w)
	}
}
