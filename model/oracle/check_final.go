package oracle

import (
	"sort"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// finish runs the end-of-run checks: every obligation resolved
// (no-silent-loss), resolved in time after the heal (liveness), and healthy
// bots served promptly whatever the others did (no-head-of-line-blocking).
func (c *checker) finish(final CheckFinal) {
	if c.endAt.IsZero() {
		c.endAt = c.now
	}
	c.now = c.endAt
	c.checkCleanupCadence()
	c.promptDue(c.endAt)
	c.snapDue(c.endAt)
	for _, name := range c.nodeNames {
		if n := c.nodes[name]; !n.up && n.booted {
			c.down = append(c.down, chkInterval{n.downSince, c.endAt})
		}
	}
	heal := c.healAt
	if !c.healed {
		heal = c.endAt
	}

	inStore := map[chkKey]impl.Message{}
	for _, m := range final.Messages {
		inStore[c.key(m.Subscriber, m.EventID)] = m
	}
	healthy := map[string]bool{}
	for _, b := range c.p.HealthyBots {
		healthy[b] = true
	}

	c.snapFinish()
	c.finishWire(final, heal)
	for _, stream := range chkSortedStrings(c.streamEvents) {
		for _, e := range c.streamEvents[stream] {
			for _, bot := range c.bots {
				if !c.memberAt(stream, bot, e.pos) {
					continue
				}
				c.obligation(e, bot, heal, inStore, healthy[bot])
			}
		}
	}
}

func (c *checker) obligation(e *chkEvent, bot string, heal time.Time, inStore map[chkKey]impl.Message, healthy bool) {
	c.stats.Obligations++
	k := c.key(bot, e.id)
	var resolved time.Time
	how := ""
	consider := func(t time.Time, ok bool, name string) {
		if ok && (resolved.IsZero() || t.Before(resolved)) {
			resolved, how = t, name
		}
	}
	h, handled := k.handled, k.hasHandled
	consider(h, handled, "handled")
	d, dead := k.deadAt, k.isDead
	consider(d, dead, "dead-lettered")
	r, dropped := k.dropped, k.hasDropped
	consider(r, dropped, "dropped by retention")
	m, stored := inStore[k]
	if !handled && !dead && !dropped && stored && m.Dead {
		// Dead in the store but never seen being dead-lettered (a backend
		// that marks dead some other way): resolved, time unknown.
		consider(heal, true, "dead-lettered")
		dead = true
	}
	switch {
	case handled:
		c.stats.Handled++
	case dead:
		c.stats.DeadLettered++
	}

	c.now, c.step = c.endAt, c.lastStep()
	deadline := heal
	if e.producedAt.After(deadline) {
		deadline = e.producedAt
	}
	if resolved.IsZero() {
		if stored {
			c.report(InvLiveness, bot, e.id, chkOnce(bot, e.id),
				"still queued at the end of the run (%s after the heal; %d attempts, last error %q), never handled, dead-lettered or dropped",
				c.endAt.Sub(heal), m.Attempts, m.LastError)
			return
		}
		c.report(InvNoSilentLoss, bot, e.id, chkOnce(bot, e.id),
			"owed (member of %s at %s, produced at step %d) but never handled, not dead-lettered, not dropped by retention, and not in the store",
			e.stream, chkPos(e.pos), e.step)
		return
	}
	if late := resolved.Sub(deadline); late > c.stats.MaxResolveAfterHeal {
		c.stats.MaxResolveAfterHeal = late
	}
	if resolved.Sub(deadline) > c.p.LivenessBound {
		c.now = resolved
		c.report(InvLiveness, bot, e.id, chkOnce(bot, e.id),
			"%s only %s after max(heal, production), beyond the liveness bound %s",
			how, resolved.Sub(deadline), c.p.LivenessBound)
	}
	if healthy && handled && e.arrived {
		c.headOfLine(e, bot, h)
	}
}

// headOfLine holds a healthy bot's delivery latency (event reaching an
// engine to the bot's handler) to HOLBound plus what the bot's own path
// legitimately costs: engine downtime in that window, a lease, a timeout
// and the spread of node clock offsets per crash (a dead node's claims must
// expire, as read by the next clock), two store retries per
// injected store fault, and a lease plus a sweep interval per ambiguous
// claim. Anything more is another bot's failures holding it
// up. An obligation a join created after the event had reached a node
// (backfilled) is timed from the join. Retention dropping the bot's copy resolves the obligation; a handling
// after that is a re-delivery of the event, timed from the first arrival
// after the last drop (the drop itself if none came).
func (c *checker) headOfLine(e *chkEvent, bot string, handledAt time.Time) {
	from := e.firstArrival
	if at, back := c.backfilled(e.stream, bot, e.pos); back && at.After(from) {
		from = at // owed only since a join that came after it reached a node
	}
	var lastDrop time.Time
	for _, d := range c.key(bot, e.id).drops {
		if d.Before(handledAt) {
			lastDrop = d
		}
	}
	if !lastDrop.IsZero() && lastDrop.After(from) {
		// The drop resolved the obligation; only a fresh arrival after it
		// owes the bot the event again (seed 303870: a repeat of the
		// batch to a node that had handed it off already was rightly
		// ignored, and the copy came back with a replay after a crash).
		from = time.Time{}
		for _, t := range e.freshAt {
			if !t.Before(lastDrop) {
				from = t
				break
			}
		}
		if from.IsZero() {
			return
		}
	}
	if handledAt.Before(from) {
		return
	}
	allow := chkOverlap(c.down, from, handledAt)
	allow += time.Duration(chkCountIn(c.crashes, from, handledAt)) * (c.p.Lease + c.p.WebhookTimeout + c.maxOffset - c.minOffset)
	for _, sf := range c.storeFault {
		if !sf.at.Before(from) && !sf.at.After(handledAt) {
			allow += sf.cost
		}
	}
	net := handledAt.Sub(from) - allow
	if net > c.stats.MaxHealthyLatency {
		c.stats.MaxHealthyLatency = net
	}
	if net > c.p.HOLBound {
		c.now = handledAt
		c.report(InvNoHeadOfLine, bot, e.id, chkOnce(bot, e.id)+"\x00hol",
			"healthy bot handled it %s after it reached an engine (%s beyond allowances of %s for downtime, crashes and store faults), above the bound %s",
			handledAt.Sub(from), net, allow, c.p.HOLBound)
	}
}

// chkOverlap is the measure of the union of ivs within [from, to].
func chkOverlap(ivs []chkInterval, from, to time.Time) time.Duration {
	var cl []chkInterval
	for _, iv := range ivs {
		a, b := iv.from, iv.to
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			cl = append(cl, chkInterval{a, b})
		}
	}
	sort.Slice(cl, func(i, j int) bool { return cl[i].from.Before(cl[j].from) })
	var total time.Duration
	var cur chkInterval
	for i, iv := range cl {
		switch {
		case i == 0:
			cur = iv
		case !iv.from.After(cur.to):
			if iv.to.After(cur.to) {
				cur.to = iv.to
			}
		default:
			total += cur.to.Sub(cur.from)
			cur = iv
		}
	}
	if len(cl) > 0 {
		total += cur.to.Sub(cur.from)
	}
	return total
}

func chkCountIn(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

func (c *checker) lastStep() int64 { return c.step }

func chkSortedStrings[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
