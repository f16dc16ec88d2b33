package oracle

// Clocks stepped while a node runs (ObsClockJump). The engine measures
// backoffs, breaker waits and request expiry on its own clock, and its
// runtime's timers measure durations in true time, so a wait that spans a
// step lasts what the clock says or what the timer says, whichever ends
// later: a step forward ends a clock wait early but not a timer's, a step
// back makes a clock wait last the step longer and leaves a timer's as
// it was. The checks that compare two clock readings of one node (sends
// and answers: backoffs, the breaker, resends) see that node's clock with
// its steps back undone (unstep), so a wait a timer ended on time is not
// called early by the clock that went back under it, and a wait that
// ended early by both is still caught. The checks that bound a wait from
// above widen by the steps back: the spread of offsets (seeOffset) and
// the snapshot waits' deadlines (clockJumped). Readings compared against
// the store's values (claims, cleanups, queue reads) stay as the clock
// read them, as the store saw them.

// seeOffset books the offset of o.Node's clock from true time that o
// shows (a boot's reading, or a step's). The spread of every offset seen
// bounds how much longer than its own clock says a node may take: a lease
// written by one clock and read by another, or a wait that a clock
// stepped back stretches by the step (the step's both ends are offsets
// seen, so the spread covers it).
func (c *checker) seeOffset(o *Observation) {
	if o.Clock.IsZero() {
		return
	}
	off := o.Clock.Sub(o.Time)
	if !c.anyOffset || off < c.minOffset {
		c.minOffset = off
	}
	if !c.anyOffset || off > c.maxOffset {
		c.maxOffset = off
	}
	c.anyOffset = true
}

// clockJumped: a running node's clock was stepped by o.Jump.
func (c *checker) clockJumped(o *Observation) {
	c.seeOffset(o)
	sp := &c.sprompt
	n := c.node(o.Node)
	if o.Jump > 0 {
		// The engine gives a request up once it is a lease old by its
		// clock: a step forward brings that the step sooner in true
		// time (in-flight-limit counts a request until then).
		for nb, s := range c.inflight.open {
			if nb.node.name == o.Node {
				for i := range s.reqs {
					s.reqs[i].at = s.reqs[i].at.Add(-o.Jump)
				}
			}
		}
	}
	if o.Jump < 0 {
		n.back -= o.Jump
		for _, w := range sp.waits {
			if w.node == o.Node {
				w.deadline = w.deadline.Add(-o.Jump)
			}
		}
		// A retry any node may make waits for the one that stepped
		// back too: every open retry, boot and ack wait lasts the step
		// longer (all alike, so their deadline order holds).
		for i := range c.prompt.queue {
			c.prompt.queue[i].deadline = c.prompt.queue[i].deadline.Add(-o.Jump)
		}
		for i := range c.boot.queue {
			c.boot.queue[i].deadline = c.boot.queue[i].deadline.Add(-o.Jump)
		}
		for i := range c.ackp.queue {
			c.ackp.queue[i].deadline = c.ackp.queue[i].deadline.Add(-o.Jump)
		}
	}
	// The snapshot waits measure the node's clock rate since a reference
	// point, on the clock unstep shows them: the step starts a new one.
	sp.boots[o.Node] = snapBoot{at: o.Time, clock: o.Clock.Add(n.back)}
}

// unstep returns o with its node's steps back undone, for a send or an
// answer (a copy: the caller's observation goes on to the other checks,
// which compare it with the store's values, as the clock read it).
func (c *checker) unstep(o *Observation) *Observation {
	if (o.Kind != ObsSend && o.Kind != ObsResult) || o.Clock.IsZero() {
		return o
	}
	n := c.nodes[o.Node]
	if n == nil || n.back == 0 {
		return o
	}
	u := *o
	u.Clock = u.Clock.Add(n.back)
	return &u
}
