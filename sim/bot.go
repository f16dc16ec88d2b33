package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// bot is a subscriber's webhook endpoint: the real receiver SDK in front of
// a handler that records what it processed, behind a network that the
// plan's webhook faults degrade.
type bot struct {
	spec BotSpec
	rx   *receiver.Receiver
	rng  *rand.Rand // latency
	frng *rand.Rand // fault rolls

	actor string // "bot/<id>", its name in the trace, made once

	hasKey      bool
	outageUntil time.Time
	// A webhook-4xx episode: every request answered clientStatus until
	// clientUntil, drawn from crng (its own stream, so no other draw
	// moves).
	clientUntil  time.Time
	clientStatus int
	crng         *rand.Rand
	// lrng: webhook-late's rolls and delays (its own stream likewise).
	lrng *rand.Rand
	// durable: the bot deduplicates through the store's durable
	// Store.MarkProcessed instead of the receiver's in-memory cache.
	durable bool
	// failRate: the bot's handler fails this often while faults are
	// injected (BotSpec.HandlerFailRate); hrng draws those failures and
	// the Middleware answer style.
	dedupProbe // the receiver's dedup window edge (boundaries_receiver.go)
	failRate   float64
	hrng       *rand.Rand
	failedIDs  map[string]bool // ids whose handler failed, not yet handled since
}

// setupBots builds the bots, withholds the keys the schedules say are
// published late, and names the healthy bots (no webhook failure
// scheduled or drawn, the key from the start, not slow).
func (s *sim) setupBots() {
	for _, spec := range s.w.Bots {
		// Some bots, drawn per seed from a stream of their own (so no other
		// draw moves), keep their seen-ids in the store (MarkProcessed), as
		// a receiver that runs on several processes must. The known-bug
		// receiver without dedup keeps none at all.
		durable := !s.cfg.Bugs.NoReceiverDedup && s.actorRand("bot/"+spec.ID+"/durable-dedup").IntN(2) == 0
		b := &bot{
			spec:    spec,
			actor:   "bot/" + spec.ID,
			durable: durable,
			rng:     s.actorRand("bot/" + spec.ID),
			frng:    s.actorRand("bot/" + spec.ID + "/faults"),
			crng:    s.actorRand("bot/" + spec.ID + "/4xx"),
			lrng:    s.actorRand("bot/" + spec.ID + "/late"),
			hasKey:  true,
			// Its own stream, so no other draw moves.
			hrng:     s.actorRand("bot/" + spec.ID + "/handler"),
			failRate: spec.HandlerFailRate, failedIDs: map[string]bool{},
		}
		rx, err := s.newBotReceiver(b)
		if err != nil {
			// Workload.Validate rules this out (a bot needs a secret).
			s.fatal = fmt.Errorf("bot %s: %w", spec.ID, err)
			return
		}
		b.rx = rx
		s.bots = append(s.bots, b)
		s.byBot[spec.ID] = b
	}
	for _, b := range s.bots {
		// An explicit late key replaces a drawn one.
		var key faults.Fault
		hasKey, scheduled := true, false
		if i := slices.IndexFunc(s.sched.Faults(), func(f faults.Fault) bool { return f.Kind == faults.LateKey && f.Bot == b.spec.ID }); i >= 0 {
			key, hasKey, scheduled = s.sched.Faults()[i], false, true
		} else if i := slices.IndexFunc(s.drawn.Faults, func(f faults.Fault) bool { return f.Kind == faults.LateKey && f.Bot == b.spec.ID }); i >= 0 {
			key, hasKey = s.drawn.Faults[i], false
		}
		b.hasKey = hasKey
		if key.Never {
			s.inject(key, scheduled, b.actor, "publish_at", "never")
		}
		s.regBots = append(s.regBots, engine.Bot{ID: b.spec.ID, Secret: b.spec.Secret, HasKey: b.hasKey})
		if !b.hasKey && !key.Never {
			s.inject(key, scheduled, b.actor, "publish_at", key.At)
			s.at(Epoch.Add(key.At), func() { s.publishKey(b) })
		}
		if b.spec.RotateAt > 0 {
			s.at(Epoch.Add(b.spec.RotateAt), func() { s.rotateKey(b) })
		}
		failing := func(k faults.Kind, bot string) bool { return bot == b.spec.ID && faults.IsWebhookFailure(k) }
		healthy := b.hasKey && b.spec.LatencyMax <= SlowBot && b.failRate == 0 &&
			!slices.ContainsFunc(s.drawn.Chances, func(c faults.Chance) bool { return failing(c.Kind, c.Bot) }) &&
			!s.sched.Has(func(f faults.Fault) bool { return failing(f.Kind, f.Bot) })
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
	s.rec(b.actor, "key-published")
	for _, n := range s.nodes {
		if n.up {
			s.stepNode(n, engine.KeyPublished{Bot: b.spec.ID}, "key-published")
		}
	}
}

// rotateKey gives b a new secret: the registry lists it (so a node that
// boots later starts with it), every node up is handed the bot again, and
// the receiver takes both keys, then after RotateGrace only the new one. A
// request signed with the old key after that is rejected, and judged.
func (s *sim) rotateKey(b *bot) {
	old := b.spec.Secret
	key := append([]byte("rotated-"), old...)
	if err := b.rx.SetSecrets([][]byte{old, key}); err != nil {
		s.fatal = fmt.Errorf("bot %s: rotating its key: %w", b.spec.ID, err)
		return
	}
	b.spec.Secret = key
	var eb engine.Bot
	for i := range s.regBots {
		if s.regBots[i].ID == b.spec.ID {
			s.regBots[i].Secret = key
			eb = s.regBots[i]
		}
	}
	s.rec(b.actor, "key-rotated")
	s.observe(oracle.Observation{Kind: oracle.ObsKeyRotated, Bot: b.spec.ID})
	for _, n := range s.nodes {
		if n.up {
			s.stepNode(n, engine.BotAdded{Bot: eb}, "bot-added")
		}
	}
	s.after(RotateGrace, func() {
		if err := b.rx.SetSecrets([][]byte{key}); err != nil {
			s.fatal = fmt.Errorf("bot %s: retiring its old key: %w", b.spec.ID, err)
		}
		s.rec(b.actor, "old-key-retired")
		s.observe(oracle.Observation{Kind: oracle.ObsKeyRetired, Bot: b.spec.ID})
	})
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
		// Through a copy: &sd handed to an unknown function would move sd
		// to the heap on every send, Wire or not.
		w := sd
		s.cfg.Wire(&w)
		sd = w
	}
	if sd.Attempt < 1 && s.fatal == nil {
		// engine.Send documents a 1-based attempt number, and the webhook
		// faults are keyed on it: a send numbered otherwise is no attempt
		// of the message the faults and the counters can place.
		s.fatal = fmt.Errorf("sim: node %s: send of %s to %s numbered attempt %d; engine.Send.Attempt is 1-based", n.name, sd.EventID, sd.Bot, sd.Attempt)
	}
	o := oracle.Observation{
		Kind: oracle.ObsSend, Node: n.name, Bot: sd.Bot, EventID: sd.EventID, Stream: sd.Stream,
		Pos: sd.Pos, Payload: sd.Body, Snapshot: sd.Snapshot, Request: seq, Clock: nodeClock{n}.Now(),
	}
	if sd.Snapshot {
		decodeChange(&o, sd.Body)
	}
	n.told.Sent++
	key := impl.MessageKey{Subscriber: sd.Bot, EventID: sd.EventID}
	n.sentKeys[key]++
	leasedAt, leased := n.leased[key]
	switch {
	case sd.Snapshot:
	case leased && n.told.Sent > leasedAt:
		delete(n.leased, key) // sent from the row it was told it holds
	default: // a direct send
		n.told.SentDirect++
		n.directReq[sd.RequestID] = true
		o.Direct = true
	}
	s.observe(o)
	s.rec(n.name, "send", "req", sd.RequestID, "bot", sd.Bot, "event", sd.EventID, "attempt", sd.Attempt)
	inc := n.inc
	b := s.byBot[sd.Bot]
	if b == nil {
		s.respond(n, inc, sd, seq, time.Millisecond, engine.OutcomeRefused, 0)
		return
	}
	actor := b.actor
	lat := between(b.rng, b.spec.LatencyMin, b.spec.LatencyMax)
	timeout := sd.Timeout
	ord := s.ordinal("send", b.spec.ID)
	at := s.elapsed()
	site := func(k faults.Kind) faults.Site {
		return faults.Site{Kind: k, At: at, Ord: ord, Bot: b.spec.ID, Event: sd.EventID, Attempt: sd.Attempt}
	}
	// fired is the fault exactly as it hit this request (what a replay
	// schedules).
	fired := func(k faults.Kind) faults.Fault {
		return faults.Fault{Kind: k, At: at, Bot: b.spec.ID, Event: sd.EventID, Attempt: sd.Attempt, Call: ord}
	}
	// An outage refuses every request to the bot, whatever its event.
	outage := func() faults.Fault {
		return faults.Fault{Kind: faults.WebhookRefused, At: at, Bot: b.spec.ID, Call: ord}
	}
	req := func(extra ...any) []any {
		return append([]any{"req", sd.RequestID, "event", sd.EventID, "attempt", sd.Attempt, "call", ord}, extra...)
	}
	refuse := func() {
		s.respond(n, inc, sd, seq, between(b.rng, time.Millisecond, 50*time.Millisecond), engine.OutcomeRefused, 0)
	}
	fail5xx := func(f faults.Fault, scheduled bool) {
		s.inject(f, scheduled, actor, req("status", f.Status)...)
		s.respond(n, inc, sd, seq, min(lat, timeout), engine.OutcomeStatus, f.Status)
	}
	timeOut := func(f faults.Fault, scheduled bool) {
		s.inject(f, scheduled, actor, req()...)
		s.process(b, sd, seq, lat, nil)
		s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
	}
	slow := func(f faults.Fault, scheduled bool) {
		s.inject(f, scheduled, actor, req("late", f.Delay)...)
		s.process(b, sd, seq, timeout+f.Delay, nil)
		s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
	}
	// hang: the connection stalls before the bot reads the request, and
	// the runtime waits forever; lose: the bot answers, and the runtime
	// loses the answer. Either way the engine is never told.
	hang := func(f faults.Fault, scheduled bool) {
		s.inject(f, scheduled, actor, req()...)
		s.neverTold(n, inc, sd, seq, timeout, false)
	}
	lose := func(f faults.Fault, scheduled bool) {
		s.inject(f, scheduled, actor, req()...)
		s.process(b, sd, seq, lat, nil)
		s.neverTold(n, inc, sd, seq, lat, true) // after the bot's answer, which is lost
	}
	// late: the connection hangs past the engine's expiry bound, then the
	// bot reads the request and answers. Only message requests are held:
	// leases (what the fault exercises) are a queue's, and a snapshot
	// change already gets hung and lost answers.
	late := func(f faults.Fault, scheduled bool) {
		s.inject(f, scheduled, actor, req("late", f.Delay)...)
		s.answerLate(n, inc, b, sd, seq, timeout, f.Delay)
	}

	if f, ok := s.sched.Take(site(faults.WebhookDuplicate)); ok {
		g := fired(faults.WebhookDuplicate)
		g.Delay = f.Delay
		s.inject(g, true, actor, req("extra", f.Delay)...)
		s.process(b, sd, seq, lat+f.Delay, nil)
	} else if _, ok := s.chance(site(faults.WebhookDuplicate), b.frng); ok {
		g := fired(faults.WebhookDuplicate)
		g.Delay = between(b.frng, 0, time.Second)
		s.inject(g, false, actor, req("extra", g.Delay)...)
		s.process(b, sd, seq, lat+g.Delay, nil)
	}

	s.maybeForge(b, sd, lat)

	// The explicit schedule first.
	if f, ok := s.sched.Take(site(faults.WebhookRefused)); ok {
		g := outage()
		g.Until = f.Until
		s.inject(g, true, actor, req()...)
		refuse()
		return
	}
	if f, ok := s.sched.Take(site(faults.Webhook5xx)); ok {
		g := fired(faults.Webhook5xx)
		g.Status = cmp.Or(f.Status, 500)
		fail5xx(g, true)
		return
	}
	if _, ok := s.sched.Take(site(faults.WebhookTimeout)); ok {
		timeOut(fired(faults.WebhookTimeout), true)
		return
	}
	if f, ok := s.sched.Take(site(faults.WebhookSlow)); ok {
		g := fired(faults.WebhookSlow)
		g.Delay = max(f.Delay, time.Millisecond)
		slow(g, true)
		return
	}
	if _, ok := s.sched.Take(site(faults.WebhookHang)); ok {
		hang(fired(faults.WebhookHang), true)
		return
	}
	if _, ok := s.sched.Take(site(faults.ResultLost)); ok {
		lose(fired(faults.ResultLost), true)
		return
	}
	if f, ok := s.takeLate(sd, site); ok {
		g := fired(faults.WebhookLate)
		g.Delay = max(f.Delay, time.Millisecond)
		late(g, true)
		return
	}
	if f, ok := s.sched.Take(site(faults.Webhook4xx)); ok {
		g := fired(faults.Webhook4xx)
		if f.Until != 0 {
			// A window is recorded as the bot's (as an outage is), with
			// the filters it was scheduled with.
			g = outage()
			g.Kind, g.Event, g.Attempt, g.Until = faults.Webhook4xx, f.Event, f.Attempt, f.Until
		}
		g.Status = cmp.Or(f.Status, 404)
		fail5xx(g, true)
		return
	}

	// Then an outage in progress, then the drawn chances, in kind order
	// (each coin is rolled only if the ones before it came up tails).
	if s.active && s.now.Before(b.outageUntil) {
		s.rec(actor, "refused", "req", sd.RequestID, "until", b.outageUntil)
		refuse()
		return
	}
	if s.active && s.now.Before(b.clientUntil) {
		s.rec(actor, "client-error", "req", sd.RequestID, "status", b.clientStatus, "until", b.clientUntil)
		s.respond(n, inc, sd, seq, min(lat, timeout), engine.OutcomeStatus, b.clientStatus)
		return
	}
	if c, ok := s.chance(site(faults.WebhookRefused), b.frng); ok {
		d := between(b.frng, time.Second, max(time.Second, c.Max))
		b.outageUntil = s.now.Add(d)
		g := outage()
		// The outage ends at the heal at the latest (and lasts at least
		// this one request).
		g.Until = min(at+d, max(s.w.FaultWindow, at+1))
		s.inject(g, false, actor, req("outage", d)...)
		refuse()
		return
	}
	if _, ok := s.chance(site(faults.Webhook5xx), b.frng); ok {
		g := fired(faults.Webhook5xx)
		g.Status = []int{500, 502, 503}[b.frng.IntN(3)]
		fail5xx(g, false)
		return
	}
	if _, ok := s.chance(site(faults.WebhookTimeout), b.frng); ok {
		timeOut(fired(faults.WebhookTimeout), false)
		return
	}
	if c, ok := s.chance(site(faults.WebhookSlow), b.frng); ok {
		g := fired(faults.WebhookSlow)
		g.Delay = between(b.frng, time.Millisecond, max(time.Millisecond, c.Max))
		slow(g, false)
		return
	}
	if _, ok := s.chance(site(faults.WebhookHang), b.frng); ok {
		hang(fired(faults.WebhookHang), false)
		return
	}
	if _, ok := s.chance(site(faults.ResultLost), b.frng); ok {
		lose(fired(faults.ResultLost), false)
		return
	}
	if g, ok := s.clientError(b, site, outage); ok {
		fail5xx(g, false)
		return
	}
	if !sd.Snapshot {
		if c, ok := s.chance(site(faults.WebhookLate), b.lrng); ok {
			g := fired(faults.WebhookLate)
			g.Delay = between(b.lrng, time.Millisecond, max(time.Millisecond, c.Max))
			late(g, false)
			return
		}
	}
	if lat >= timeout {
		// Naturally too slow: processed, but the engine gives up first.
		s.process(b, sd, seq, lat, nil)
		s.respond(n, inc, sd, seq, timeout, engine.OutcomeTimeout, 0)
		return
	}
	// The reply reads process's copy of the request (sent), not sd: a
	// closure that captured sd would move it to the heap on every send.
	s.process(b, sd, seq, lat, func(sent *engine.Send, res receiver.Result) {
		outcome := engine.OutcomeOK
		if res.Status < 200 || res.Status > 299 {
			outcome = engine.OutcomeStatus
		}
		s.deliverResult(n, inc, *sent, seq, outcome, res.Status)
	})
}

// process has the bot's receiver handle the request after d; reply, if
// set, carries the answer back to the engine in the same step (given the
// request, sd). seq names the send (snapshot apps apply changes in send
// order).
func (s *sim) process(b *bot, sd engine.Send, seq int64, d time.Duration, reply func(*engine.Send, receiver.Result)) {
	s.inflight++
	s.after(d, func() {
		s.inflight--
		actor := b.actor
		req := receiver.Request{Body: sd.Body, Headers: webhook.Headers{
			ID: sd.EventID, Timestamp: s.tsText(sd.Timestamp), Signature: sd.Signature}}
		res := s.receive(b, req, func(_ context.Context, ev receiver.Event) error {
			if s.handlerFails(b) {
				s.rec(actor, "handler-failed", "req", sd.RequestID, "event", ev.ID)
				s.observe(oracle.Observation{Kind: oracle.ObsHandlerFailed, Bot: b.spec.ID, EventID: ev.ID, Request: seq, Snapshot: sd.Snapshot})
				b.failedIDs[ev.ID] = true
				return errHandlerFailed
			}
			if b.failedIDs[ev.ID] {
				delete(b.failedIDs, ev.ID)
				s.cov.hit(CovFailedRedeliver)
			}
			s.counters.Deliveries++
			o := oracle.Observation{Kind: oracle.ObsHandled, Bot: b.spec.ID, EventID: ev.ID, Payload: ev.Body,
				Snapshot: sd.Snapshot, Stream: sd.Stream, Request: seq, Stamp: sd.Timestamp, Stamped: true}
			if sd.Snapshot {
				decodeChange(&o, ev.Body)
			}
			s.observe(o)
			return nil
		})
		if res.Outcome == receiver.Handled {
			s.maybeDedupProbe(b, sd, seq)
		}
		switch res.Outcome {
		case receiver.Duplicate:
			s.counters.Duplicates++
			if b.spec.Entry != RxHandle {
				s.cov.hit(CovHTTPDuplicate)
			}
			s.observe(oracle.Observation{Kind: oracle.ObsDuplicate, Bot: b.spec.ID, EventID: sd.EventID, Request: seq, Snapshot: sd.Snapshot,
				Stamp: sd.Timestamp, Stamped: true})
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
			reply(&sd, res)
		}
	})
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
	if s.w.ResultBatch > 0 {
		s.holdResult(n, inc, sd, seq, o, status)
		return
	}
	s.rec(n.name, "result", "req", sd.RequestID, "outcome", outcomeName(o), "status", status)
	s.observe(oracle.Observation{Kind: oracle.ObsResult, Node: n.name, Bot: sd.Bot, EventID: sd.EventID,
		OK: o == engine.OutcomeOK, Request: seq, Outcome: outcomeName(o), Status: status, Clock: nodeClock{n}.Now(), Snapshot: sd.Snapshot})
	n.toldResult(sd, o)
	s.stepNode(n, engine.WebhookResult{RequestID: sd.RequestID, Outcome: o, Status: status}, "result")
}

// neverTold ends request seq on the wire, after d, as one whose outcome
// its node is never told (webhook-hang, result-lost): the oracle sees the
// wire outcome "lost" and no result. The run is kept from going quiet for
// the engine's documented expiry bound after it (a lease, then up to a
// cleanup interval until the housekeeping that expires it, plus the
// clock drift a lease may suffer), since a direct send's obligation has
// no queue row to keep it alive meanwhile.
func (s *sim) neverTold(n *node, inc int, sd engine.Send, seq int64, d time.Duration, processed bool) {
	direct := !sd.Snapshot && n.inc == inc && n.directReq[sd.RequestID] // before a reboot reuses the id
	s.inflight++
	s.after(d, func() {
		s.observe(oracle.Observation{Kind: oracle.ObsWire, Node: n.name, Bot: sd.Bot, EventID: sd.EventID,
			Request: seq, Outcome: oracle.OutcomeLost, Snapshot: sd.Snapshot, Direct: direct})
		if !sd.Snapshot {
			s.cov.answered(n.name, impl.MessageKey{Subscriber: sd.Bot, EventID: sd.EventID}, n.inc == inc && n.up)
		}
		s.cov.lost(n, inc, sd, processed, direct)
		s.rec(n.name, "result-never-told", "req", sd.RequestID)
		s.after(2*(s.ecfg.Lease+s.ecfg.CleanupInterval), func() { s.inflight-- })
	})
}

// takeLate takes a scheduled webhook-late fault for a message's request
// (a snapshot change is never held: see send).
func (s *sim) takeLate(sd engine.Send, site func(faults.Kind) faults.Site) (faults.Fault, bool) {
	if sd.Snapshot {
		return faults.Fault{}, false
	}
	return s.sched.Take(site(faults.WebhookLate))
}

// answerLate carries request seq as webhook-late holds it. By the timeout
// its node has been told nothing and will not be in time: the wire record
// is a lost request (as a hung one's), marked Late because it is still on
// the wire. The bot reads it once the node's clock has passed the
// engine's expiry bound for it (a lease, then up to a cleanup interval
// until the housekeeping that gives it up) plus extra, processes it and
// answers; the oracle sees that answer as ObsLateAnswer, never as a
// result, and the runtime hands it to the node, which must ignore it.
func (s *sim) answerLate(n *node, inc int, b *bot, sd engine.Send, seq int64, timeout, extra time.Duration) {
	direct := n.inc == inc && n.directReq[sd.RequestID]
	s.inflight++
	s.after(timeout, func() {
		s.inflight--
		s.observe(oracle.Observation{Kind: oracle.ObsWire, Node: n.name, Bot: sd.Bot, EventID: sd.EventID,
			Request: seq, Outcome: oracle.OutcomeLost, Direct: direct, Late: true})
		s.cov.lost(n, inc, sd, false, direct)
		s.rec(n.name, "result-never-told", "req", sd.RequestID, "late", true)
	})
	bound := nodeClock{n}.Now().Add(s.ecfg.Lease + s.ecfg.CleanupInterval + extra)
	fwd := n.fwd
	expired := n.virtualTime(bound)
	s.process(b, sd, seq, max(expired.Sub(s.now), timeout+time.Millisecond), func(_ *engine.Send, res receiver.Result) {
		outcome := engine.OutcomeOK
		if res.Status < 200 || res.Status > 299 {
			outcome = engine.OutcomeStatus
		}
		s.observe(oracle.Observation{Kind: oracle.ObsLateAnswer, Node: n.name, Bot: sd.Bot, EventID: sd.EventID,
			Request: seq, Outcome: outcomeName(outcome), OK: outcome == engine.OutcomeOK, Status: res.Status})
		key := impl.MessageKey{Subscriber: sd.Bot, EventID: sd.EventID}
		s.cov.answered(n.name, key, n.inc == inc && n.up)
		s.cov.lateAnswer(key, seq)
		if n.inc != inc || !n.up {
			s.rec(n.name, "result-lost", "req", sd.RequestID)
			return
		}
		s.handLate(n, inc, lateBound{bound, fwd}, func() {
			s.rec(n.name, "result-late", "req", sd.RequestID, "outcome", outcomeName(outcome), "status", res.Status)
			s.stepNode(n, engine.WebhookResult{RequestID: sd.RequestID, Outcome: outcome, Status: res.Status}, "result")
		})
	})
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

// clientStatuses are the 4xx a webhook-4xx episode answers: the first four
// dead-letter at once under impl.PermanentStatus, the rest are retried.
var clientStatuses = []int{400, 404, 410, 422, 401, 408, 409, 429}

// clientError rolls the drawn chance that b starts a webhook-4xx episode:
// every request answered one 4xx for up to the plan's Max, or, one time in
// four, until the heal (the engine cannot tell that from a bot that refuses
// for good). The fault returned covers the whole episode, as an outage's
// does, so a replay answers every request of it alike.
func (s *sim) clientError(b *bot, site func(faults.Kind) faults.Site, window func() faults.Fault) (faults.Fault, bool) {
	c, ok := s.chance(site(faults.Webhook4xx), b.crng)
	if !ok {
		return faults.Fault{}, false
	}
	at := s.elapsed()
	d := between(b.crng, time.Second, max(time.Second, c.Max))
	if b.crng.IntN(4) == 0 {
		d = max(s.w.FaultWindow-at, time.Second)
	}
	b.clientStatus = clientStatuses[b.crng.IntN(len(clientStatuses))]
	b.clientUntil = s.now.Add(d)
	g := window()
	g.Kind, g.Status = faults.Webhook4xx, b.clientStatus
	g.Until = min(at+d, max(s.w.FaultWindow, at+1))
	return g, true
}
