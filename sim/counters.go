package sim

import (
	"fmt"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// reported-counters (oracle.InvReportedCounters) is judged here, at the
// end of a run: the counters an engine process reports about itself
// (engine.Counters, which `serve` exports on /metrics as
// deliverysim_engine_*_total) agree with what the world saw that process do
// since it started. A crashed incarnation's counters die with it, so only
// the nodes up at the end are judged, each against its current
// incarnation:
//
//   - sent: the webhook requests it sent (snapshot notifications included);
//   - enqueued: the rows its enqueues inserted, as the store answered;
//   - retention_ttl, retention_cap: the rows its retention calls answered
//     they deleted;
//   - requeued: the dead letters its requeues made live again;
//   - store_errors: the store calls that answered it with an error
//     (injected before or after the write, or from the store itself);
//   - sent_direct: the requests it sent not from a row it was told it had
//     claimed or inserted leased to itself (none at all when the engine is
//     configured engine.HandOffQueued: every obligation is written to the
//     queue before it is sent); delivered: those answered 2xx;
//   - acked: at least the keys its Ack calls were answered for plus
//     delivered, plus its snapshot changes answered 2xx less its
//     RecordDelivered calls answered with an error, and at most that plus
//     its snapshot changes answered 2xx (a change counts once its
//     delivered state is recorded);
//   - cursor_writes: the cursors its conditional writes were answered
//     written, and its async cursor writes that completed (an async write
//     is not told whether the store already held a newer cursor);
//   - dead_lettered: at least the rows its Fail calls were answered are
//     dead, plus the snapshot changes (app, webhook-id) it was told
//     MaxAttempts failures of (a change given up on has no row);
//   - failed: at most the failed answers it was told, and at least those to
//     a request for a message it sent only once (an answer to an earlier
//     request of a message sent again may be superseded);
//   - breaker_opened: at least the openings breaker-policy is certain of
//     (BreakerFailures consecutive failures told while closed, or a failure
//     told while half-open; oracle.Checker.BreakerOpens).
//
// Its notes (engine.Note), from which a runtime derives its per-bot
// dead-letter counter and breaker gauge, report at least the same dead
// letters (kind dead) and breaker openings (kind breaker, into open), and
// exactly its store errors (kind store-error).
//
// A store call's answer counts only once it reaches the engine unchanged:
// a write made ambiguous by a fault counts as an error, not as its effects.

// toldResult books an answer the node was told.
func (n *node) toldResult(sd engine.Send, o engine.Outcome) {
	if o == engine.OutcomeOK {
		switch {
		case sd.Snapshot:
			n.snapOK++
		case n.directReq[sd.RequestID]:
			n.told.Delivered++
			n.told.Acked++
		}
		return
	}
	n.failTold++
	if sd.Snapshot {
		n.snapFailed[impl.MessageKey{Subscriber: sd.Bot, EventID: sd.EventID}]++
	}
	if n.sentKeys[impl.MessageKey{Subscriber: sd.Bot, EventID: sd.EventID}] == 1 {
		n.failSure++
	}
}

// counterViolations compares each node up at the end with its own report.
func (s *sim) counterViolations() []oracle.Violation {
	var out []oracle.Violation
	for _, n := range s.nodes {
		if !n.up || n.eng == nil {
			continue
		}
		got, saw := n.eng.Counters(), n.told
		bad := func(format string, args ...any) {
			out = append(out, oracle.Violation{Invariant: oracle.InvReportedCounters, Time: s.now, Step: s.step,
				Detail: fmt.Sprintf("node %s (incarnation %d): ", n.name, n.inc) + fmt.Sprintf(format, args...)})
		}
		for _, c := range []struct {
			name      string
			got, want int
		}{
			{"sent", got.Sent, saw.Sent},
			{"enqueued", got.Enqueued, saw.Enqueued},
			{"retention_ttl", got.RetentionTTL, saw.RetentionTTL},
			{"retention_cap", got.RetentionCap, saw.RetentionCap},
			{"requeued", got.Requeued, saw.Requeued},
			{"store_errors", got.StoreErrors, saw.StoreErrors},
			{"cursor_writes", got.CursorWrites, saw.CursorWrites},
			{"sent_direct", got.SentDirect, saw.SentDirect},
			{"delivered", got.Delivered, saw.Delivered},
		} {
			if c.got != c.want {
				bad("reports %s %d, but the world saw %d", c.name, c.got, c.want)
			}
		}
		if snapMin := max(n.snapOK-n.snapErrs, 0); got.Acked < saw.Acked+snapMin || got.Acked > saw.Acked+n.snapOK {
			bad("reports acked %d, but its Ack calls were answered for %d keys and %d requests sent from no row it held were answered 2xx (plus %d snapshot changes answered 2xx, of which %d RecordDelivered errors may have left some unrecorded)",
				got.Acked, saw.Acked-saw.Delivered, saw.Delivered, n.snapOK, n.snapErrs)
		}
		snapDead := 0
		for _, f := range n.snapFailed {
			if f >= s.ecfg.MaxAttempts {
				snapDead++
			}
		}
		if got.DeadLettered < saw.DeadLettered+snapDead {
			bad("reports dead_lettered %d, but its Fail calls were answered dead %d times and it was told MaxAttempts failures of %d snapshot changes", got.DeadLettered, saw.DeadLettered, snapDead)
		}
		if n.notedErrs != saw.StoreErrors {
			bad("noted %d store errors (engine.Note kind store-error, each a warning in the runtime's log), but %d of its store calls answered it with an error", n.notedErrs, saw.StoreErrors)
		}
		if n.notedDead < saw.DeadLettered+snapDead {
			bad("noted %d dead letters (engine.Note kind dead, what the runtime's per-bot dead-letter counter counts), but its Fail calls were answered dead %d times and it was told MaxAttempts failures of %d snapshot changes", n.notedDead, saw.DeadLettered, snapDead)
		}
		if saw.SentDirect > 0 && s.ecfg.HandOff == engine.HandOffQueued && !s.ecfg.Bugs.CursorBeforeDirectAnswer {
			bad("is configured to hand off queued (every obligation written to the queue before it is sent), but sent %d requests from no row it was told it had claimed or inserted leased to itself", saw.SentDirect)
		}
		if opens := s.chk.BreakerOpens(n.name); got.BreakerOpened < opens || n.notedOpen < opens {
			bad("reports breaker_opened %d and noted %d breaker openings (engine.Note kind breaker, what the runtime's breaker gauge follows), but breaker-policy's account of what it was told shows its breakers opened at least %d times", got.BreakerOpened, n.notedOpen, opens)
		}
		if got.Failed > n.failTold || got.Failed < n.failSure {
			bad("reports failed %d, but it was told of %d failed attempts, %d of them for messages it sent once", got.Failed, n.failTold, n.failSure)
		}
	}
	return out
}
