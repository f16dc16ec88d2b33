package engine

import (
	"fmt"
	"slices"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

type botState struct {
	id       string
	secret   []byte
	sig      *webhook.Signer // for secret; built on first send
	hasKey   bool
	inflight int
	br       breaker

	// due holds, sorted and distinct, the future instants at which some of
	// this bot's queued messages become claimable (retry times, leases left
	// by a crashed incarnation, store-error back-offs). One wake timer is
	// armed at the earliest.
	due     []time.Time
	armedID uint64
	armedAt time.Time

	touched uint64 // Engine.touchGen of the last WebhookResults that saw it

	// backlog: the store may hold messages of this bot that are (or soon
	// will be) claimable. While it is set, new messages are enqueued for a
	// claim to take in queue order rather than leased and sent at once.
	// It is cleared when a claim comes back with fewer than it asked for.
	backlog bool
}

func (e *Engine) botFor(id string) *botState {
	b := e.bots[id]
	if b == nil {
		b = &botState{id: id, backlog: true} // until resumeQueue has looked
		e.bots[id] = b
		e.botIDs = insertSorted(e.botIDs, id)
	}
	return b
}

func (b *botState) signer() *webhook.Signer {
	if b.sig == nil {
		b.sig = webhook.NewSigner(b.secret)
	}
	return b.sig
}

func (e *Engine) upsertBot(in Bot) *botState {
	b := e.botFor(in.ID)
	b.secret = in.Secret
	b.sig = nil
	b.hasKey = in.HasKey
	return b
}

func (e *Engine) onBotAdded(in Bot) {
	e.pump(e.upsertBot(in))
}

func (e *Engine) onKeyPublished(id string) {
	b := e.botFor(id)
	b.hasKey = true
	e.pump(b)
}

// addDue records that some message of b becomes claimable at at.
func (e *Engine) addDue(b *botState, at time.Time) {
	b.backlog = true
	i, found := slices.BinarySearchFunc(b.due, at, func(x, y time.Time) int { return x.Compare(y) })
	if !found {
		b.due = slices.Insert(b.due, i, at)
	}
	e.armBot(b)
}

// claimRetry schedules the pump after a failed claim. A wake-up already
// due by then pumps the bot anyway, so no instant is added for it: one
// instant per failure would pile up during a long outage, each failed
// retry re-adding itself while every other pump (arrivals, results,
// housekeeping) added one more.
func (e *Engine) claimRetry(b *botState) {
	at := e.now.Add(e.cfg.StoreRetry)
	if len(b.due) > 0 && !b.due[0].After(at) {
		b.backlog = true
		e.armBot(b)
		return
	}
	e.addDue(b, at)
}

func (e *Engine) armBot(b *botState) {
	if len(b.due) == 0 {
		return
	}
	if b.armedID != 0 && !b.due[0].Before(b.armedAt) {
		return
	}
	b.armedAt = b.due[0]
	b.armedID = e.setTimer(timerInfo{kind: timerWake, bot: b.id, at: b.armedAt})
}

func (e *Engine) onWake(id uint64, t timerInfo) {
	b := e.bots[t.bot]
	if b == nil {
		return
	}
	if b.armedID == id {
		b.armedID = 0
	}
	n := 0
	for n < len(b.due) && !b.due[n].After(e.now) {
		n++
	}
	b.due = b.due[n:]
	e.pump(b)
	if e.crashed {
		return
	}
	// A timer that fired before its instant (the node's clock lags the
	// runtime's) is simply armed again.
	e.armBot(b)
}

// limit is how many requests b may have outstanding now.
func (e *Engine) limit(b *botState) int {
	switch b.br.state {
	case breakerOpen:
		return 0
	case breakerHalfOpen:
		return 1
	}
	if e.cfg.Bugs.SharedInflightSlot {
		others := 0
		for _, id := range e.botIDs {
			if id != b.id {
				others += e.bots[id].inflight
			}
		}
		return max(0, 1-others)
	}
	return e.cfg.MaxInFlightPerBot
}

// pump claims b's due messages up to its free in-flight slots and sends
// them. It is the only path from the queue to the network.
func (e *Engine) pump(b *botState) {
	if !b.hasKey {
		return
	}
	if e.cfg.Bugs.BreakerDropsWhenOpen && b.br.state == breakerOpen {
		e.dropWhileOpen(b)
		return
	}
	free := e.limit(b) - b.inflight
	if free <= 0 {
		// Whatever woke this pump (a retry coming due, a requeue) is
		// left for the next result to claim; with the flag clear no
		// result would (scenario retry-due-behind-a-slow-newer-send: a
		// direct send held the only slot at the retry's wake-up, and
		// housekeeping sent the retry 2h later).
		b.backlog = true
		return
	}
	msgs, err := e.store.Claim(e.ctx, impl.ClaimRequest{
		Subscriber: b.id, Owner: e.cfg.Node, Now: e.now, Lease: e.cfg.Lease, Limit: free,
	})
	if err != nil {
		e.storeErr("claim", err)
		e.claimRetry(b)
		return
	}
	// A short claim found all that was due, so new messages may go direct;
	// a full one may have left more behind, which results must refill
	// (seed 91898: a claim cleared the flag while the rows it waited for
	// were still leased, the full claim at their expiry left one behind,
	// and nothing claimed it until housekeeping 94 s later).
	b.backlog = len(msgs) == free
	if len(msgs) == 0 {
		return
	}
	if e.crashAt(CrashAfterStoreWriteBeforeSend) {
		return
	}
	e.bugDeleteBeforeSend(msgs, nil)
	// One allocation for the whole claim instead of append's doublings:
	// a replay claims a batch at a time.
	e.out.Sends = slices.Grow(e.out.Sends, len(msgs))
	// A claim returns distinct keys, so only what was pending or
	// outstanding before it can match; when nothing was (a replay's
	// batches), no key needs hashing.
	checkPending, checkOutstanding := len(e.pendingOps) > 0, len(e.byKey) > 0
	for i := range msgs {
		m := &msgs[i]
		key := m.Key()
		if checkPending {
			// A failed direct send may still wait for its row to be
			// written, but a row exists after all (an earlier
			// incarnation's): it carries the obligation, and is sent.
			e.dropRecord(key)
			if op, ok := e.pendingOps[key]; ok {
				// The message's last attempt is still unrecorded; record
				// it now that we hold the lease instead of sending again.
				e.runOp(key, op)
				continue
			}
		}
		if checkOutstanding {
			// Its lease lapsed while a request was outstanding.
			e.supersede(b, key)
		}
		e.sendMessage(b, m)
	}
}

// supersede forgets the outstanding request for key, if there is one: the
// attempt about to be sent replaces it, and its result will be ignored.
func (e *Engine) supersede(b *botState, key impl.MessageKey) {
	if old, ok := e.byKey[key]; ok {
		e.reqs.take(old)
		b.inflight--
	}
}

func (e *Engine) sendMessage(b *botState, m *impl.Message) {
	e.nextReq++
	id := e.nextReq
	key := m.Key()
	r := e.reqs.add(id)
	*r = request{key: key, stream: m.Stream, pos: m.Pos, attempt: m.Attempts + 1, sentAt: e.now, bot: b}
	e.byKey[key] = id
	e.emitSend(b, id, r, m.Payload)
}

// sendDirect sends event ev of stream s to bot b with no queue row
// (HandOffDirect). It is kept out of byKey: nothing in the store can
// supersede it, and a queued copy of the same message (left by an earlier
// incarnation) is delivered on its own; the receiver drops whichever
// arrives second.
func (e *Engine) sendDirect(b *botState, s *streamState, ev *Event, hold uint64) {
	e.nextReq++
	id := e.nextReq
	r := e.reqs.add(id)
	*r = request{key: impl.MessageKey{Subscriber: b.id, EventID: ev.ID}, stream: s.id, pos: ev.Pos, attempt: 1,
		sentAt: e.now, direct: true, hold: hold, body: ev.Payload, bot: b}
	if hold != 0 {
		r.held = s
	}
	e.cnt.SentDirect++
	e.emitSend(b, id, r, ev.Payload)
}

// emitSend emits request id, kept as r, with body.
func (e *Engine) emitSend(b *botState, id uint64, r *request, body []byte) {
	b.inflight++
	ts := e.now.Unix()
	e.out.Sends = append(e.out.Sends, Send{
		RequestID: id,
		Bot:       b.id,
		EventID:   r.key.EventID,
		Stream:    r.stream,
		Pos:       r.pos,
		Timestamp: ts,
		Signature: e.sigs.sign(b.signer(), r.key.EventID, ts, body),
		Body:      body,
		Timeout:   e.cfg.WebhookTimeout,
		Attempt:   r.attempt,
	})
	e.cnt.Sent++
}

func (e *Engine) onResult(r WebhookResult) {
	req, ok := e.reqs.take(r.RequestID)
	if !ok {
		return // superseded or expired; the store lease has taken over
	}
	if req.snap != nil {
		e.onSnapResult(r.RequestID, req, r)
		return
	}
	b := e.release(r.RequestID, &req)
	e.settle(b, req, r)
	if e.crashed {
		return
	}
	e.refill(b)
}

// refill claims for b after results freed some of its request slots:
// in batches rather than one claim per result, so a backlogged bot with
// more than half its slots still taken waits for more answers. Those may
// never come (a hung request, a lost answer: its slot is freed only when
// housekeeping gives it up, minutes later), so the bot is woken once every
// request outstanding now has had its timeout (seed 9982: five of eight
// slots held by unanswered requests left a failed retry unsent for 5 min).
func (e *Engine) refill(b *botState) {
	if e.wantsRefill(b) {
		e.pump(b)
		return
	}
	if !b.backlog || b.inflight >= e.limit(b) {
		return
	}
	at := e.now.Add(e.cfg.WebhookTimeout)
	if len(b.due) > 0 && !b.due[0].After(at) {
		return
	}
	e.addDue(b, at)
}

// wantsRefill says whether a result should be followed by a claim for its
// bot: when half its request slots are free, unless new messages reach it
// directly (the store enqueues leased) and nothing of it is known to be
// waiting in the queue; a claim would then come back empty. The periodic
// sweep still claims for every bot, which picks up what another node left.
func (e *Engine) wantsRefill(b *botState) bool {
	if b.inflight > e.limit(b)/2 {
		return false
	}
	if e.leaser != nil && !b.backlog {
		return false
	}
	return true
}

// leaserOf returns the store's leased enqueue, with which the engine sends
// new messages without a claim, if the store has the capability. Known-bug
// variants run on the same hand-off as the reference: each differs from it
// only in its own branch.
func leaserOf(store impl.Store) impl.LeasingEnqueuer {
	le, _ := impl.AsLeasingEnqueuer(store)
	return le
}

// bugDeleteBeforeSend is the known-bug variant Bugs.DeleteBeforeSend: the
// rows about to be sent (claimed, or enqueued leased: those of msgs leased
// to this node and inserted, ins[i], when ins is given) are deleted first,
// so a failed send or a crash before the answer loses them.
func (e *Engine) bugDeleteBeforeSend(msgs []impl.Message, ins []bool) {
	if !e.cfg.Bugs.DeleteBeforeSend {
		return
	}
	var keys []impl.MessageKey
	for i := range msgs {
		if ins == nil || (ins[i] && msgs[i].LeaseOwner != "") {
			keys = append(keys, msgs[i].Key())
		}
	}
	if len(keys) == 0 {
		return
	}
	if _, err := e.store.Ack(e.ctx, keys); err != nil {
		e.storeErr("ack", err)
	}
}

// release takes a finished request off its bot's in-flight books.
func (e *Engine) release(id uint64, req *request) *botState {
	if cur, ok := e.byKey[req.key]; ok && cur == id {
		delete(e.byKey, req.key)
	}
	b := req.bot
	if b == nil {
		b = e.botFor(req.key.Subscriber)
	}
	if b.inflight > 0 {
		b.inflight--
	}
	return b
}

// onResults is WebhookResults: each result as onResult would take it,
// except that successes are acknowledged with one store call and each bot
// is refilled once, at the end.
func (e *Engine) onResults(rs []WebhookResult) {
	keys, reqs := e.ackKeys[:0], e.ackReqs[:0]
	defer func() {
		clear(reqs)
		e.ackKeys, e.ackReqs = keys[:0], reqs[:0]
	}()
	var touched []*botState
	e.touchGen++
	if len(e.byKey) > 0 {
		e.markDeadBesideDirect(rs)
	}
	for _, r := range rs {
		if s := e.reqs.slot(r.RequestID); s != nil && s.req.direct && r.Outcome == OutcomeOK {
			// A direct send's 2xx, a replay's every answer: settled through
			// the slot (nothing here sends, so the slot stays put).
			b := e.release(r.RequestID, &s.req)
			if b.touched != e.touchGen {
				b.touched = e.touchGen
				touched = append(touched, b)
			}
			e.breakerSuccess(b)
			e.delivered(&s.req)
			e.reqs.remove(s)
			continue
		}
		req, ok := e.reqs.take(r.RequestID)
		if !ok {
			continue
		}
		if req.snap != nil {
			e.onSnapResult(r.RequestID, req, r)
			if e.crashed {
				return
			}
			continue
		}
		b := e.release(r.RequestID, &req)
		if b.touched != e.touchGen {
			b.touched = e.touchGen
			touched = append(touched, b)
		}
		// A direct send has no row to delete: settle books it.
		if r.Outcome == OutcomeOK && !req.direct && !e.cfg.Bugs.DeleteBeforeSend {
			e.breakerSuccess(b)
			keys = append(keys, req.key)
			reqs = append(reqs, req)
			continue
		}
		e.settle(b, req, r)
		if e.crashed {
			return
		}
	}
	if len(keys) > 0 {
		e.ackAll(keys, reqs)
		if e.crashed {
			return
		}
	}
	for _, b := range touched {
		e.refill(b)
		if e.crashed {
			return
		}
	}
}

// markDeadBesideDirect marks for dead-lettering the requests of this node
// holding the rows of messages whose direct sends rs answers with a
// permanent status. Marking them when the direct send is recorded (runOp)
// is too late if rs settles the row's request first: its failure leaves
// the row live and no longer leased to this node, so the direct send's
// Fail cannot touch it.
func (e *Engine) markDeadBesideDirect(rs []WebhookResult) {
	for _, r := range rs {
		if !permanent(r) {
			continue
		}
		if req, ok := e.reqs.get(r.RequestID); ok && req.direct {
			if id, busy := e.byKey[req.key]; busy {
				e.markDead(id)
			}
		}
	}
}

// markDead makes request id's failure, when it comes, dead-letter its row.
func (e *Engine) markDead(id uint64) {
	if s := e.reqs.slot(id); s != nil {
		s.req.dead = true
	}
}

// ackAll deletes the messages of several successful requests in one store
// call. If it fails they become pending acks, retried like a single one.
func (e *Engine) ackAll(keys []impl.MessageKey, reqs []request) {
	if e.crashAt(CrashAfterSendBeforeAck) {
		return
	}
	if e.writer != nil {
		e.deferAcks(keys, reqs)
		return
	}
	n, err := e.store.Ack(e.ctx, keys)
	if err != nil {
		for i, k := range keys {
			e.pendAck(k, reqs[i])
		}
		e.retryLater("ack", err)
		return
	}
	e.acked(keys, reqs, n)
}

// acked books the successful Ack of keys (n rows deleted).
func (e *Engine) acked(keys []impl.MessageKey, reqs []request, n int) {
	e.out.Notes = slices.Grow(e.out.Notes, len(keys))
	count, detail := 1, ""
	if n != len(keys) {
		count, detail = -1, fmt.Sprintf("batch ack deleted %d of %d", n, len(keys))
	}
	for i, k := range keys {
		if len(e.pendingOps) > 0 {
			e.dropRecord(k)
			delete(e.pendingOps, k)
		}
		e.cnt.Acked++
		e.note(Note{Kind: "acked", Bot: k.Subscriber, EventID: k.EventID, Stream: reqs[i].stream, Pos: reqs[i].pos, Count: count, Detail: detail})
	}
}

// pendAck leaves the ack of a successful request for the store-retry timer.
// It replaces whatever was pending for the key; a direct send's pending row
// write among them no longer matters (the message was delivered), but its
// hold on the stream's cursor must be released, or the cursor never passes
// the event again (found by the simulator: seed 17040, cursor-progress).
func (e *Engine) pendAck(k impl.MessageKey, req request) {
	e.dropRecord(k)
	e.pendingOps[k] = pendingOp{kind: opAck, stream: req.stream, pos: req.pos}
}

// settle records one request's outcome: the ack of a success, or the
// failure (retry, dead letter, or a known bug's drop).
func (e *Engine) settle(b *botState, req request, r WebhookResult) {
	if req.direct {
		if r.Outcome == OutcomeOK {
			e.breakerSuccess(b)
			e.delivered(&req)
			return
		}
		e.cnt.Failed++
		e.breakerFailure(b)
		e.recordDirect(req, e.now.Add(Backoff(e.cfg, req.attempt, e.jitter())), describe(r), permanent(r))
		return
	}
	if r.Outcome == OutcomeOK {
		if e.crashAt(CrashAfterSendBeforeAck) {
			return
		}
		e.breakerSuccess(b)
		if e.cfg.Bugs.DeleteBeforeSend {
			e.cnt.Acked++ // already deleted at claim time
			e.note(Note{Kind: "acked", Bot: req.key.Subscriber, EventID: req.key.EventID, Stream: req.stream, Pos: req.pos, Count: 1})
		} else {
			e.runOp(req.key, pendingOp{kind: opAck, stream: req.stream, pos: req.pos})
		}
	} else {
		e.cnt.Failed++
		e.breakerFailure(b)
		switch {
		case e.cfg.Bugs.NoRequeueOnFailure:
			e.runOp(req.key, pendingOp{kind: opDrop, reason: describe(r), stream: req.stream, pos: req.pos})
		case e.cfg.Bugs.DeleteBeforeSend:
			// Nothing left in the store to retry: the bug's loss.
		default:
			next := e.now.Add(Backoff(e.cfg, req.attempt, e.jitter()))
			e.runOp(req.key, pendingOp{kind: opFail, next: next, reason: describe(r), attempt: req.attempt, dead: permanent(r) || req.dead})
		}
	}
}

// delivered books a direct send's 2xx: nothing to delete, and the cursor
// may pass the event once the rest of its hold is answered.
func (e *Engine) delivered(req *request) {
	e.cnt.Acked++
	e.cnt.Delivered++
	e.note(Note{Kind: "delivered", Bot: req.key.Subscriber, EventID: req.key.EventID, Stream: req.stream, Pos: req.pos, Count: 1})
	if req.held != nil {
		e.releaseHoldOf(req.held, req.hold)
	}
}

// recordDirect makes a failed (or unanswered) direct send durable: its row
// is written leased to this node and then failed like a claimed message's,
// so it is retried after next, or dead-lettered, exactly as if it had been
// queued from the start. Its hold is released once the row is written.
// permanent says whether r dead-letters its message at once
// (impl.PermanentStatus, the documented policy).
func permanent(r WebhookResult) bool {
	return r.Outcome == OutcomeStatus && impl.PermanentStatus(r.Status)
}

func (e *Engine) recordDirect(req request, next time.Time, reason string, dead bool) {
	m := &impl.Message{
		Subscriber: req.key.Subscriber, EventID: req.key.EventID, Stream: req.stream, Pos: req.pos,
		Payload: req.body, CreatedAt: req.sentAt,
	}
	e.runOp(req.key, pendingOp{kind: opRecord, next: next, reason: reason, attempt: req.attempt, dead: dead,
		stream: req.stream, pos: req.pos, msg: m, hold: req.hold})
}

// dropRecord forgets the pending row write of a failed direct send of key,
// if there is one, and releases its hold: a row for key exists, or the
// message was delivered, so the obligation is carried without it.
func (e *Engine) dropRecord(key impl.MessageKey) {
	if op, ok := e.pendingOps[key]; ok && op.kind == opRecord {
		delete(e.pendingOps, key)
		e.releaseHold(op.stream, op.hold)
	}
}

func describe(r WebhookResult) string {
	switch r.Outcome {
	case OutcomeStatus:
		return fmt.Sprintf("status %d", r.Status)
	case OutcomeTimeout:
		return "timeout"
	case OutcomeRefused:
		return "refused"
	}
	return "ok"
}

// runPending retries the op left pending for key, if any.
func (e *Engine) runPending(key impl.MessageKey) {
	if op, ok := e.pendingOps[key]; ok {
		e.runOp(key, op)
	}
}

// runOp performs the store write that records an attempt's outcome (or an
// operator's requeue), replacing whatever was pending for key. If the store
// fails, op is left in pendingOps for the store-retry timer; meanwhile the
// message stays leased to us.
func (e *Engine) runOp(key impl.MessageKey, op pendingOp) {
	failed := func(name string, err error) {
		e.pendingOps[key] = op
		e.retryLater(name, err)
	}
	if len(e.pendingOps) > 0 {
		if op.kind != opRecord {
			// Another request settled the same message first: it was
			// delivered, or a row for it exists (it was claimed from
			// one), so a direct send's obligation no longer waits on
			// writing one.
			e.dropRecord(key)
		}
		delete(e.pendingOps, key)
	}
	switch op.kind {
	case opRecord:
		m := *op.msg
		m.LeaseOwner, m.LeaseUntil = e.cfg.Node, e.now.Add(e.cfg.Lease)
		ins, err := e.leaser.EnqueueLeased(e.ctx, []impl.Message{m})
		if err == nil && len(ins) != 1 {
			err = fmt.Errorf("store returned %d results for 1 message", len(ins))
		}
		if err != nil {
			failed("enqueue", err)
			return
		}
		e.releaseHold(op.stream, op.hold)
		if ins[0] {
			e.cnt.Enqueued++
			e.note(Note{Kind: "enqueued", Bot: key.Subscriber, EventID: key.EventID, Stream: op.stream, Pos: op.pos, Count: 1, Detail: op.reason})
		} else {
			// A row exists already. If it is ours (an earlier try of this
			// write committed but was reported ambiguous) the Fail below
			// records the attempt on it; if not, Fail leaves it alone and
			// it is claimed when due, so wake the bot by the time any
			// lease on it has lapsed.
			e.addDue(e.botFor(key.Subscriber), m.LeaseUntil)
			if id, busy := e.byKey[key]; busy {
				// This node holds that row for a request of it still in
				// flight: recording the direct send's failure on it would
				// end that lease early, and another node could claim and
				// send the message while the request is on the wire
				// (seed 781, check_lease.go). The request in flight
				// records its own outcome, but a permanent status must
				// not be forgotten there: retrying what cannot succeed
				// breaks the retry bound (seed 165571: a timeout of the
				// row's request, settled after the 400, left it live).
				if op.dead {
					e.markDead(id)
				}
				return
			}
		}
		e.runOp(key, pendingOp{kind: opFail, next: op.next, reason: op.reason, attempt: op.attempt, dead: op.dead})
	case opAck, opDrop:
		n, err := e.store.Ack(e.ctx, []impl.MessageKey{key})
		if err != nil {
			failed("ack", err)
			return
		}
		if op.kind == opAck {
			e.cnt.Acked++
			e.note(Note{Kind: "acked", Bot: key.Subscriber, EventID: key.EventID, Stream: op.stream, Pos: op.pos, Count: n})
		} else {
			e.note(Note{Kind: "dropped", Bot: key.Subscriber, EventID: key.EventID, Stream: op.stream, Pos: op.pos, Count: n, Detail: op.reason})
		}
	case opFail:
		maxAttempts := e.cfg.MaxAttempts
		if e.cfg.Bugs.UnboundedRetry {
			maxAttempts = 1 << 30
		}
		if op.dead {
			maxAttempts = 1 // a permanent status: no retry can succeed
		}
		m, ok, err := e.store.Fail(e.ctx, impl.FailRequest{Key: key, Owner: e.cfg.Node, NextAttempt: op.next, MaxAttempts: maxAttempts, Reason: op.reason})
		if err != nil {
			failed("fail", err)
			return
		}
		if !ok {
			return // someone else holds it now; their outcome counts
		}
		if m.Dead {
			e.cnt.DeadLettered++
			e.note(Note{Kind: "dead", Bot: key.Subscriber, EventID: key.EventID, Stream: m.Stream, Pos: m.Pos, Count: m.Attempts, Detail: op.reason})
			return
		}
		e.addDue(e.botFor(key.Subscriber), m.NextAttemptAt)
	case opRequeue:
		ok, err := e.store.Requeue(e.ctx, key, e.now)
		if err != nil {
			failed("requeue", err)
			return
		}
		if !ok {
			return
		}
		e.cnt.Requeued++
		e.note(Note{Kind: "requeued", Bot: key.Subscriber, EventID: key.EventID, Count: 1})
		b := e.botFor(key.Subscriber)
		b.backlog = true
		e.pump(b)
	}
}

func (e *Engine) onRequeue(key impl.MessageKey) {
	e.runOp(key, pendingOp{kind: opRequeue})
}

// resumeQueue, on boot, learns when each bot's leftover messages become
// claimable so that retries scheduled before a crash still happen on time.
func (e *Engine) resumeQueue() {
	msgs, err := e.store.ListMessages(e.ctx, "")
	e.resumePending = err != nil
	if err != nil {
		e.retryLater("list-messages", err)
		return
	}
	live := map[string]bool{}
	dueNow := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		if s := e.streams[m.Stream]; s != nil && (!s.hasRows || m.Pos.Compare(s.rowsUpTo) > 0) {
			s.rowsUpTo, s.hasRows = m.Pos, true
		}
		if m.Dead {
			continue
		}
		b := e.botFor(m.Subscriber)
		live[b.id] = true
		due := m.NextAttemptAt
		if m.LeaseUntil.After(due) {
			due = m.LeaseUntil
		}
		if due.After(e.now) {
			j, found := slices.BinarySearchFunc(b.due, due, func(x, y time.Time) int { return x.Compare(y) })
			if !found {
				b.due = slices.Insert(b.due, j, due)
			}
		} else {
			dueNow[b.id] = true
		}
	}
	for _, id := range e.botIDs {
		b := e.bots[id]
		b.backlog = live[id]
		e.armBot(b)
		if dueNow[id] {
			e.pump(b)
			if e.crashed {
				return
			}
		}
	}
}

// dropWhileOpen is the BreakerDropsWhenOpen bug: seed 001's breaker answers
// an open circuit with a fallback and nothing else, so whatever comes due
// for the bot while it is open is deleted unsent.
func (e *Engine) dropWhileOpen(b *botState) {
	msgs, err := e.store.Claim(e.ctx, impl.ClaimRequest{
		Subscriber: b.id, Owner: e.cfg.Node, Now: e.now, Lease: e.cfg.Lease, Limit: 1000,
	})
	if err != nil || len(msgs) == 0 {
		return
	}
	if _, err := e.store.Ack(e.ctx, keysOf(msgs)); err != nil {
		e.storeErr("ack", err)
		return
	}
	for _, m := range msgs {
		e.note(Note{Kind: "dropped", Bot: b.id, EventID: m.EventID, Stream: m.Stream, Pos: m.Pos, Count: 1, Detail: "breaker open"})
	}
}

func keysOf(msgs []impl.Message) []impl.MessageKey {
	keys := make([]impl.MessageKey, len(msgs))
	for i := range msgs {
		keys[i] = msgs[i].Key()
	}
	return keys
}
