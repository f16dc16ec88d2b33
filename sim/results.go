package sim

import (
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Result batching (Workload.ResultBatch): a runtime that is busy collects
// the webhook answers that come back meanwhile and hands them to the engine
// together, as one engine.WebhookResults. The engine must treat the batch
// as the same results one by one (one Ack call for the successes, one
// refill per bot): the oracle judges the same invariants either way.

// heldResult is one answer waiting in its node's batch.
type heldResult struct {
	seq  int64
	sd   engine.Send
	o    engine.Outcome
	code int
}

// holdResult queues an answer for n's next batch, which is handed over
// ResultBatch after its first answer arrived (if the node incarnation that
// sent them is still up; otherwise they are lost, as a crash loses them).
func (s *sim) holdResult(n *node, inc int, sd engine.Send, seq int64, o engine.Outcome, status int) {
	n.held = append(n.held, heldResult{seq: seq, sd: sd, o: o, code: status})
	if len(n.held) > 1 {
		return
	}
	s.after(s.w.ResultBatch, func() {
		held := n.held
		n.held = nil
		if n.inc != inc || !n.up {
			for _, h := range held {
				s.rec(n.name, "result-lost", "req", h.sd.RequestID)
			}
			return
		}
		rs := make([]engine.WebhookResult, 0, len(held))
		for _, h := range held {
			s.rec(n.name, "result", "req", h.sd.RequestID, "outcome", outcomeName(h.o), "status", h.code, "batch", len(held))
			s.observe(oracle.Observation{Kind: oracle.ObsResult, Node: n.name, Bot: h.sd.Bot, EventID: h.sd.EventID,
				OK: h.o == engine.OutcomeOK, Request: h.seq, Outcome: outcomeName(h.o), Status: h.code, Clock: nodeClock{n}.Now(), Snapshot: h.sd.Snapshot})
			n.toldResult(h.sd, h.o)
			rs = append(rs, engine.WebhookResult{RequestID: h.sd.RequestID, Outcome: h.o, Status: h.code})
		}
		if len(rs) == 1 {
			s.stepNode(n, rs[0], "result")
			return
		}
		ok, bad := false, false
		for _, r := range rs {
			ok, bad = ok || r.Outcome == engine.OutcomeOK, bad || r.Outcome != engine.OutcomeOK
		}
		if ok && bad {
			s.cov.hit(CovBatchedMixed)
		}
		s.stepNode(n, engine.WebhookResults{Results: rs}, "results")
	})
}
