package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// failureKinds are the webhook faults that make a bot unhealthy.
var failureKinds = []faults.Kind{faults.WebhookTimeout, faults.Webhook5xx, faults.WebhookRefused, faults.WebhookSlow}

// bot is a subscriber's webhook endpoint: the real receiver SDK in front of
// a handler that records what it processed, behind a network that the
// plan's webhook faults degrade.
type bot struct {
	spec BotSpec
	rx   *receiver.Receiver
	rng  *rand.Rand // latency
	frng *rand.Rand // fault rolls

	affected    map[faults.Kind]bool
	hasKey      bool
	outageUntil time.Time
	// durable: the bot deduplicates through the store's durable
	// Store.MarkProcessed instead of the receiver's in-memory cache.
	durable bool
}

// setupBots builds the bots and decides, from the plan, which ones each
// webhook fault affects and which publish their key late. With two or more
// bots one of them is kept healthy, so that head-of-line blocking is
// measurable.
func (s *sim) setupBots() {
	r := actorRand(s.cfg.Seed, "faults/assign")
	ref := -1
	if len(s.w.Bots) >= 2 {
		ref = r.IntN(len(s.w.Bots))
	}
	for _, spec := range s.w.Bots {
		// Some bots, drawn per seed from a stream of their own (so no other
		// draw moves), keep their seen-ids in the store (MarkProcessed), as
		// a receiver that runs on several processes must. The known-bug
		// receiver without dedup keeps none at all.
		durable := !s.cfg.Bugs.NoReceiverDedup && actorRand(s.cfg.Seed, "bot/"+spec.ID+"/durable-dedup").IntN(2) == 0
		b := &bot{
			spec:     spec,
			durable:  durable,
			rng:      actorRand(s.cfg.Seed, "bot/"+spec.ID),
			frng:     actorRand(s.cfg.Seed, "bot/"+spec.ID+"/faults"),
			affected: map[faults.Kind]bool{},
			hasKey:   true,
		}
		rx, err := receiver.New(receiver.Config{
			Secrets: [][]byte{spec.Secret}, Window: s.w.ReceiverWindow, MaxEntries: s.w.ReceiverEntries,
			NoDedup: s.cfg.Bugs.NoReceiverDedup || durable,
		})
		if err != nil {
			// Workload.Validate rules this out (a bot needs a secret).
			s.fatal = fmt.Errorf("bot %s: %w", spec.ID, err)
			return
		}
		b.rx = rx
		s.bots = append(s.bots, b)
		s.byBot[spec.ID] = b
	}
	for _, k := range failureKinds {
		if !s.plan.Enabled(k) {
			continue
		}
		var candidates []*bot
		for i, b := range s.bots {
			if i == ref {
				continue
			}
			candidates = append(candidates, b)
			if r.Float64() < 0.6 {
				b.affected[k] = true
			}
		}
		if len(candidates) > 0 && !slices.ContainsFunc(candidates, func(b *bot) bool { return b.affected[k] }) {
			candidates[r.IntN(len(candidates))].affected[k] = true
		}
	}
	var keyAt []time.Duration
	for i, b := range s.bots {
		d := time.Duration(0)
		if i != ref && s.plan.Enabled(faults.LateKey) && r.Float64() < s.plan.Rate(faults.LateKey) {
			latest := min(max(s.plan.Get(faults.LateKey).Max, time.Minute), s.w.FaultWindow)
			d = between(r, time.Second, latest)
			b.hasKey = false
		}
		keyAt = append(keyAt, d)
	}
	for i, b := range s.bots {
		schedKey := false
		for _, f := range s.sched.faults {
			if f.Kind != faults.LateKey || f.Bot != b.spec.ID {
				continue
			}
			b.hasKey = false
			keyAt[i] = f.At
			schedKey = true
			if f.Never {
				keyAt[i] = -1
				s.inject(faults.LateKey, "bot/"+b.spec.ID, "publish_at", "never", "scheduled", true)
			}
			break
		}
		s.regBots = append(s.regBots, engine.Bot{ID: b.spec.ID, Secret: b.spec.Secret, HasKey: b.hasKey})
		if !b.hasKey && keyAt[i] >= 0 {
			if schedKey {
				s.inject(faults.LateKey, "bot/"+b.spec.ID, "publish_at", keyAt[i], "scheduled", true)
			} else {
				s.inject(faults.LateKey, "bot/"+b.spec.ID, "publish_at", keyAt[i])
			}
			s.at(Epoch.Add(keyAt[i]), func() { s.publishKey(b) })
		}
		healthy := b.hasKey && b.spec.LatencyMax <= SlowBot
		for _, k := range failureKinds {
			healthy = healthy && !b.affected[k]
		}
		healthy = healthy && !s.schedHas(func(f Fault) bool { return f.Bot == b.spec.ID && isWebhookFailure(f.Kind) })
		if healthy {
			s.healthy = append(s.healthy, b.spec.ID)
		}
	}
	slices.SortFunc(s.regBots, func(a, b engine.Bot) int { return strings.Compare(a.ID, b.ID) })
	slices.Sort(s.healthy)
}

func (s *sim) publishKey(b *bot) {
	b.hasKey = true
	for i := range s.regBots {
		if s.regBots[i].ID == b.spec.ID {
			s.regBots[i].HasKey = true
		}
	}
	s.rec("bot/"+b.spec.ID, "key-published")
	for _, n := range s.nodes {
		if n.up {
			s.stepNode(n, engine.KeyPublished{Bot: b.spec.ID}, "key-published")
		}
	}
}

// send carries one webhook request from node n to its bot and schedules
// what comes back, degraded by the scheduled faults and the plan's webhook
// faults.
func (s *sim) send(n *node, sd engine.Send) {
	s.counters.Sends++
	s.activity++
	s.sendSeq++
	seq := s.sendSeq
	if sd.Attempt > 1 {
		s.counters.Retries++
	}
	if s.cfg.Wire != nil {
		s.cfg.Wire(&sd)
	}
	o := oracle.Observation{
		Kind: oracle.ObsSend, Node: n.name, Bot: sd.Bot, EventID: sd.EventID, Stream: sd.Stream,
		Pos: sd.Pos, Payload: sd.Body, Snapshot: sd.Snapshot, Request: seq, Clock: nodeClock{n}.Now(),
	}
	if sd.Snapshot {
		decodeChange(&o, sd.Body)
	}
	s.observe(o)
	s.rec(n.name, "send", "req", sd.RequestID, "bot", sd.Bot, "event", sd.EventID, "attempt", sd.Attempt)
	inc := n.inc
	b := s.byBot[sd.Bot]
	if b == nil {
		s.respond(n, inc, sd, seq, time.Millisecond, engine.OutcomeRefused, 0)
		return
	}
	actor := "bot/" + b.spec.ID
	lat := between(b.rng, b.spec.LatencyMin, b.spec.LatencyMax)
	timeout := sd.Timeout
	ord := s.ordinal("send:" + b.spec.ID)
	scheduled := func(k faults.Kind) (Fault, bool) {
		if len(s.sched.faults) == 0 {
			return Fault{}, false
		}
		return s.schedTake(func(f Fault) bool {
			return f.Kind == k && matchRequest(f, b.spec.ID, sd.EventID, sd.Attempt) && s.reached(f, ord)
		})
	}
	if f, ok := scheduled(faults.WebhookDuplicate); ok {
		s.inject(faults.WebhookDuplicate, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "extra", f.Delay, "scheduled", true)
		s.process(b, sd, seq, lat+f.Delay, nil)
	} else if s.active && roll(b.frng, s.plan.Rate(faults.WebhookDuplicate)) {
		extra := between(b.frng, 0, time.Second)
		s.inject(faults.WebhookDuplicate, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "extra", extra)
		s.process(b, sd, seq, lat+extra, nil)
	}

	if _, ok := scheduled(faults.WebhookRefused); ok {
		s.inject(faults.WebhookRefused, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "scheduled", true)
		s.respond(n, inc, sd, seq, between(b.rng, time.Millisecond, 50*time.Millisecond), engine.OutcomeRefused, 0)
		return
	}
	if f, ok := scheduled(faults.Webhook5xx); ok {
		status := f.Status
		if status == 0 {
			status = 500
		}
		s.inject(faults.Webhook5xx, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "status", status, "scheduled", true)
		s.respond(n, inc, sd, seq, min(lat, timeout), engine.OutcomeStatus, status)
		return
	}
	if _, ok := scheduled(faults.WebhookTimeout); ok {
		s.inject(faults.WebhookTimeout, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "scheduled", true)
		s.process(b, sd, seq, lat, nil)
		s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
		return
	}
	if f, ok := scheduled(faults.WebhookSlow); ok {
		late := max(f.Delay, time.Millisecond)
		s.inject(faults.WebhookSlow, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "late", late, "scheduled", true)
		s.process(b, sd, seq, timeout+late, nil)
		s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
		return
	}

	if s.active {
		switch {
		case s.now.Before(b.outageUntil):
			s.rec(actor, "refused", "req", sd.RequestID, "until", b.outageUntil)
			s.respond(n, inc, sd, seq, between(b.rng, time.Millisecond, 50*time.Millisecond), engine.OutcomeRefused, 0)
			return
		case b.affected[faults.WebhookRefused] && roll(b.frng, s.plan.Rate(faults.WebhookRefused)):
			d := between(b.frng, time.Second, max(time.Second, s.plan.Get(faults.WebhookRefused).Max))
			b.outageUntil = s.now.Add(d)
			s.inject(faults.WebhookRefused, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "outage", d)
			s.respond(n, inc, sd, seq, between(b.rng, time.Millisecond, 50*time.Millisecond), engine.OutcomeRefused, 0)
			return
		case b.affected[faults.Webhook5xx] && roll(b.frng, s.plan.Rate(faults.Webhook5xx)):
			status := []int{500, 502, 503}[b.frng.IntN(3)]
			s.inject(faults.Webhook5xx, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "status", status)
			s.respond(n, inc, sd, seq, min(lat, timeout), engine.OutcomeStatus, status)
			return
		case b.affected[faults.WebhookTimeout] && roll(b.frng, s.plan.Rate(faults.WebhookTimeout)):
			s.inject(faults.WebhookTimeout, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord)
			s.process(b, sd, seq, lat, nil)
			s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
			return
		case b.affected[faults.WebhookSlow] && roll(b.frng, s.plan.Rate(faults.WebhookSlow)):
			late := between(b.frng, time.Millisecond, max(time.Millisecond, s.plan.Get(faults.WebhookSlow).Max))
			s.inject(faults.WebhookSlow, actor, "req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord, "late", late)
			s.process(b, sd, seq, timeout+late, nil)
			s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
			return
		}
	}
	if lat >= timeout {
		// Naturally too slow: processed, but the engine gives up first.
		s.process(b, sd, seq, lat, nil)
		s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
		return
	}
	s.process(b, sd, seq, lat, func(res receiver.Result) {
		outcome := engine.OutcomeOK
		if res.Status < 200 || res.Status > 299 {
			outcome = engine.OutcomeStatus
		}
		s.deliverResult(n, inc, sd, seq, outcome, res.Status)
	})
}

// process has the bot's receiver handle the request after d; reply, if
// set, carries the answer back to the engine in the same step. seq names
// the send (snapshot apps apply changes in send order).
func (s *sim) process(b *bot, sd engine.Send, seq int64, d time.Duration, reply func(receiver.Result)) {
	s.inflight++
	s.after(d, func() {
		s.inflight--
		actor := "bot/" + b.spec.ID
		req := receiver.Request{Body: sd.Body, Headers: webhook.Headers{
			ID: sd.EventID, Timestamp: strconv.FormatInt(sd.Timestamp, 10), Signature: sd.Signature}}
		res := b.rx.Handle(context.Background(), s.now, req, func(_ context.Context, ev receiver.Event) error {
			if b.durable && !s.markProcessed(b, ev.ID) {
				s.counters.Duplicates++
				s.rec(actor, "durable-duplicate", "req", sd.RequestID, "event", ev.ID)
				return nil
			}
			s.counters.Deliveries++
			o := oracle.Observation{Kind: oracle.ObsHandled, Bot: b.spec.ID, EventID: ev.ID, Payload: ev.Body,
				Snapshot: sd.Snapshot, Stream: sd.Stream, Request: seq}
			if sd.Snapshot {
				decodeChange(&o, ev.Body)
			}
			s.observe(o)
			return nil
		})
		switch res.Outcome {
		case receiver.Duplicate:
			s.counters.Duplicates++
		case receiver.Rejected:
			s.counters.Rejected++
			o := oracle.Observation{Kind: oracle.ObsRejected, Bot: b.spec.ID, EventID: sd.EventID, Request: seq,
				Detail: res.Reason, Snapshot: sd.Snapshot}
			if strings.Contains(res.Reason, "timestamp") {
				o.Clock = time.Unix(sd.Timestamp, 0).UTC()
			}
			s.observe(o)
		}
		s.rec(actor, res.Outcome.String(), "req", sd.RequestID, "event", sd.EventID, "status", res.Status, "reason", res.Reason)
		if reply != nil {
			reply(res)
		}
	})
}

// markProcessed records a durable bot's handler run in the store
// (Store.MarkProcessed over the receiver's window) and reports whether this
// is the first run of id within it. A store error counts as first: the
// handler runs, as a receiver that cannot reach its store must choose
// delivery over loss.
func (s *sim) markProcessed(b *bot, id string) bool {
	first, err := s.store.MarkProcessed(s.ctx, impl.MarkRequest{Subscriber: b.spec.ID, EventID: id, Now: s.now, Window: s.w.ReceiverWindow})
	if err != nil {
		s.rec("bot/"+b.spec.ID, "store-real-error", "method", "MarkProcessed", "err", err.Error())
		return true
	}
	return first
}

// respond delivers an outcome to the node after d.
func (s *sim) respond(n *node, inc int, sd engine.Send, seq int64, d time.Duration, o engine.Outcome, status int) {
	s.inflight++
	s.after(d, func() {
		s.inflight--
		s.deliverResult(n, inc, sd, seq, o, status)
	})
}

// deliverResult ends request seq on the wire with outcome o (observed
// whether or not its node is still there to hear it) and tells the node.
func (s *sim) deliverResult(n *node, inc int, sd engine.Send, seq int64, o engine.Outcome, status int) {
	s.observe(oracle.Observation{Kind: oracle.ObsWire, Node: n.name, Bot: sd.Bot, EventID: sd.EventID,
		Request: seq, Outcome: outcomeName(o), Status: status, Snapshot: sd.Snapshot})
	if !sd.Snapshot {
		s.cov.answered(n.name, impl.MessageKey{Subscriber: sd.Bot, EventID: sd.EventID}, n.inc == inc && n.up)
	}
	if n.inc != inc || !n.up {
		s.rec(n.name, "result-lost", "req", sd.RequestID)
		return
	}
	s.rec(n.name, "result", "req", sd.RequestID, "outcome", outcomeName(o), "status", status)
	s.observe(oracle.Observation{Kind: oracle.ObsResult, Node: n.name, Bot: sd.Bot, EventID: sd.EventID,
		OK: o == engine.OutcomeOK, Request: seq, Outcome: outcomeName(o), Status: status, Clock: nodeClock{n}.Now(), Snapshot: sd.Snapshot})
	s.stepNode(n, engine.WebhookResult{RequestID: sd.RequestID, Outcome: o, Status: status}, "result")
}

func outcomeName(o engine.Outcome) string {
	switch o {
	case engine.OutcomeOK:
		return "ok"
	case engine.OutcomeStatus:
		return "status"
	case engine.OutcomeTimeout:
		return "timeout"
	case engine.OutcomeRefused:
		return "refused"
	}
	return "unknown"
}
