package oracle

import "time"

// ackedAfterDelivery judges acked-after-delivery at the end of the run:
// a live row the store still holds for a message whose 2xx reached an
// engine long before. The other invariants cannot see it: the bot handled
// the event (no-silent-loss and liveness are satisfied) and the duplicates
// a never-acked row keeps causing are at-least-once's to allow. What it
// costs is a queue that never drains and a resend every lease, forever.
//
// The bound is half the liveness bound from the first 2xx since the row
// was last enqueued or requeued, or from the heal if that was later: an
// ack lost with a crash or deferred by AckDelay, or failing against the
// store, is retried within minutes once faults stop. A re-enqueue of the
// same key (an upstream replay) starts the count again, so a row the
// upstream recreated after its delivery is judged on its own 2xx.
func (c *checker) ackedAfterDelivery(final CheckFinal, heal time.Time) {
	bound := c.p.LivenessBound / 2
	for _, m := range final.Messages {
		if m.Dead {
			continue
		}
		k := c.key(m.Subscriber, m.EventID)
		ok, told := k.okSinceRow, k.hasOkSinceRow
		if !told {
			continue
		}
		from := ok
		if heal.After(from) {
			from = heal
		}
		if c.endAt.Sub(from) > bound {
			c.now, c.step = c.endAt, c.lastStep()
			c.report(InvAckedAfterDelivery, k.bot, k.event, chkOnce(k.bot, k.event)+"\x00drain",
				"still a live row at the end of the run (%d attempts, leased to %q), though a node was told of its 2xx at %s, %s before the end (bound %s after the heal)",
				m.Attempts, m.LeaseOwner, ok.UTC().Format(time.RFC3339Nano), c.endAt.Sub(ok), bound)
		}
	}
}
