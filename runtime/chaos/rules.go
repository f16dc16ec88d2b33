// The rules: one predicate per question asked of the recorded history.
// The settle's wait for quiescence, the judge and the report all call these
// and nothing else, so they cannot answer one question two ways (issue 37:
// the settle and the judge once disagreed on whether a message whose last
// answer was a permanent status was resolved, and a correct engine failed
// liveness with "0 obligations were still open"). PROTOCOL.md states each
// rule once, in the section named beside it.

package chaos

import (
	"fmt"
	"slices"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// failedAttempt: the engine saw q fail (PROTOCOL.md, Webhooks): a non-2xx,
// a rejected signature, a refused (reset) connection, a connection that
// ended before the answer, or any answer after its webhook timeout.
func failedAttempt(q *request, p judgeParams) bool {
	switch q.outcome {
	case outStatus, outTimeout, outRejected, outReset, outDropped:
		return true
	case outOK:
		return q.answered.Sub(q.at) > p.WebhookTimeout // the engine gave up first
	}
	return false
}

// gave2xx: a 2xx reached the engine's connection within its timeout. The
// engine may have learned it; whether it surely did is learned2xx.
func gave2xx(q *request, p judgeParams) bool {
	return q.outcome == outOK && !failedAttempt(q, p)
}

// learned reports whether the engine learned q's outcome as a completed
// attempt (PROTOCOL.md, Kills): it has an answer, and the answer came at
// least KillWindow before the SIGKILL that ended the process that sent it.
func (r *recorder) learned(q *request, p judgeParams) bool {
	if q.outcome == outNone {
		return false
	}
	if k := r.killEnding(q.at); k != nil && !q.answered.Before(k.at.Add(-p.KillWindow)) {
		return false
	}
	return true
}

// learned2xx is "the engine learned a 2xx": the one question
// idempotent-replay turns on, and what ends the attempts that may count
// against a dead letter.
func (r *recorder) learned2xx(q *request, p judgeParams) bool {
	return gave2xx(q, p) && r.learned(q, p)
}

// attemptsMade is the most attempts an engine may have counted against a
// message: every request on the wire since the last 2xx it surely learned,
// whatever the answer and whether or not it came (an engine that counts an
// attempt when it sends counts one cut short by a kill). It is the bound a
// dead letter is judged against (PROTOCOL.md, Webhooks: "after its
// configured number of attempts"); bounded-retry asks the other way round,
// which attempts the engine surely learned (learned, and countedFailures).
func (r *recorder) attemptsMade(reqs []*request, p judgeParams) int {
	n := 0
	for _, q := range reqs {
		if r.learned2xx(q, p) {
			n = 0
			continue
		}
		n++
	}
	return n
}

// lastPermanent: the last answer the bot gave to the message was a
// permanent status (impl.PermanentStatus), which PROTOCOL.md lets an
// engine dead-letter at once. A connection that failed after it (reset,
// dropped, timed out) is the latest answer, and it is not permanent.
func lastPermanent(reqs []*request) bool {
	for i := len(reqs) - 1; i >= 0; i-- {
		switch q := reqs[i]; q.outcome {
		case outNone:
			continue // no answer yet (or never): the one before it decides
		case outStatus:
			return impl.PermanentStatus(q.status)
		default:
			return false
		}
	}
	return false
}

// deadReason is empty when a message counts as dead-lettered, and else
// says why not. With dead letters exposed on the observation endpoint
// (exposesDead) the engine must list it, having counted at least max
// attempts that the wire agrees with; without, the wire alone decides: max
// attempts made, or a permanent last answer (PROTOCOL.md, Observation).
func (r *recorder) deadReason(k key, reqs []*request, p judgeParams) string {
	made := r.attemptsMade(reqs, p)
	if !r.exposesDead() {
		if lastPermanent(reqs) || (p.MaxAttempts > 0 && made >= p.MaxAttempts) {
			return ""
		}
		return fmt.Sprintf("no dead_letters exposed, and the wire shows %d attempts since its last 2xx (fewer than the declared max attempts %d) and no permanent last answer", made, p.MaxAttempts)
	}
	d, ok := r.dead[k]
	switch {
	case !ok:
		return "not reported dead"
	case lastPermanent(reqs):
		return ""
	case d.attempts < p.MaxAttempts:
		return fmt.Sprintf("reported dead after %d attempts, fewer than the declared max attempts %d", d.attempts, p.MaxAttempts)
	case made < p.MaxAttempts:
		why := fmt.Sprintf("reported dead with %d attempts, but the bot saw only %d requests since its last 2xx (refused connections included)", d.attempts, made)
		if len(reqs) > 0 {
			if n := r.emptyConnsLocked(k.bot, reqs[0].at, d.at); n > 0 {
				why += fmt.Sprintf("; %d connections to it in that time closed before carrying a whole request: an attempt the engine gave up on before writing it is not one (PROTOCOL.md, Attempts and dead letters)", n)
			}
		}
		return why
	}
	return ""
}

// resolved is "the obligation is resolved": the bot's handler ran, the
// message is dead-lettered (deadReason), or the engine's declared
// retention may have dropped it (mayDrop). The settle waits for it,
// no-silent-loss and liveness judge it, and the report counts by it.
func (r *recorder) resolved(k key, reqs []*request, p judgeParams, v *retentionView) bool {
	if _, ok := r.firstHandled[k]; ok {
		return true
	}
	return v.mayDrop(k) || r.deadReason(k, reqs, p) == ""
}

// openLocked lists the obligations not resolved, in production order.
func (r *recorder) openLocked(p judgeParams) (owed int, open []key) {
	reqs := r.byKey()
	v := r.retentionView(p)
	r.obligations(func(id string, _ *produced, bot string) {
		owed++
		if k := (key{bot, id}); !r.resolved(k, reqs[k], p, v) {
			open = append(open, k)
		}
	})
	return owed, open
}

// outstanding counts the obligations owed and those still open.
func (r *recorder) outstanding(p judgeParams) (owed, open int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	owed, keys := r.openLocked(p)
	return owed, len(keys)
}

// settled is the settle's test, taken about ten times a second: it
// records the obligations open now (the last call's list is what liveness
// judges: a message resolved after the bound is still late) and returns
// whether there are none.
func (r *recorder) settled(p judgeParams) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, r.settleOpen = r.openLocked(p)
	return len(r.settleOpen) == 0
}

// settleLeft counts what the settle still waits for, as of its last test
// (settled, snapSettled): obligations open and apps apart from their
// repositories. The settle measures progress by it falling.
func (r *recorder) settleLeft() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.settleOpen) + len(r.snap.settleApart)
}

// settleGaveUp records why the settle ended with work open (liveness says it).
func (r *recorder) settleGaveUp(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleWhy = why
}

// ttlSlack: a held message counts as older than the TTL this much sooner
// than the wire shows (the engine stamps it when it reads the upstream's
// answer, which the harness timed as it wrote it; clocks read at
// millisecond resolution).
const ttlSlack = 250 * time.Millisecond

// retentionView is what the wire shows of each held backlog (a bot
// registered without a key, while the engine may not yet know its key),
// built once per pass over the obligations (r.mu held). Nil when the
// engine declares no retention: then nothing may be dropped.
type retentionView struct {
	ttl  time.Duration
	cap  int
	bots map[string]*heldBacklog
}

// heldBacklog is one keyless bot's held messages.
type heldBacklog struct {
	// until is the latest instant the engine may still hold the bot
	// (heldUntil): retention touches held messages only.
	until time.Time
	// first and last are each held event's first serve and last serve
	// before until (the engine enqueued it after one of them).
	first, last map[string]time.Time
	lasts       []time.Time // every last, sorted (cap ranks)
}

// retentionView builds the view mayDrop reads; r.mu is held.
func (r *recorder) retentionView(p judgeParams) *retentionView {
	if !p.Retention {
		return nil
	}
	v := &retentionView{ttl: p.Declared.RetentionTTL, cap: p.Declared.RetentionMax, bots: map[string]*heldBacklog{}}
	r.obligations(func(id string, e *produced, bot string) {
		if !r.keyless[bot] || len(e.served) == 0 {
			return
		}
		b := v.bots[bot]
		if b == nil {
			b = &heldBacklog{until: r.heldUntil(bot, p), first: map[string]time.Time{}, last: map[string]time.Time{}}
			v.bots[bot] = b
		}
		if !e.served[0].Before(b.until) {
			return
		}
		b.first[id] = e.served[0]
		for _, s := range e.served {
			if s.Before(b.until) {
				b.last[id] = s
			}
		}
		b.lasts = append(b.lasts, b.last[id])
	})
	for _, b := range v.bots {
		slices.SortFunc(b.lasts, func(x, y time.Time) int { return x.Compare(y) })
	}
	return v
}

// heldUntil is the latest instant the engine may still treat bot as
// without a key: rotationGrace after the key was published (PROTOCOL.md:
// a registry change reaches the engine within it), pushed to storeGrace
// after the end of a database fault over that span (an engine stuck on
// its store applies the change late); no later than its first request to
// the bot after the publication (it knew the key then); and no later
// than KillWindow after the kill that ended the process alive at the
// publication (a process started after it reads the registry before it
// cleans up, and a stall's held bytes are cut, never delivered late). A
// key never published: the end of the run.
func (r *recorder) heldUntil(bot string, p judgeParams) time.Time {
	at, ok := r.keyAt[bot]
	if !ok {
		return time.Now()
	}
	until := at.Add(rotationGrace)
	for _, w := range r.dbFaults {
		if !w.from.After(until) && !w.to.Before(at) && w.to.Add(storeGrace(p)).After(until) {
			until = w.to.Add(storeGrace(p))
		}
	}
	for _, q := range r.requests {
		if q.bot == bot && !q.at.Before(at) && q.at.Before(until) {
			until = q.at
			break
		}
	}
	if k := r.killEnding(at); k != nil && k.at.Add(p.KillWindow).Before(until) {
		until = k.at.Add(p.KillWindow)
	}
	return until
}

// mayDrop is "retention may have dropped the message": the engine
// declares retention, k's bot was held when the engine first fetched the
// event, and either the event may have been older than the TTL (less
// ttlSlack) while the bot was held, or at least the cap of other held
// messages of that bot may be newer (each one's last fetch while held is
// no earlier than k's first: the cap keeps the newest). Such a message is
// no loss (resolved); retention-bounds judges the rest of the backlog.
func (v *retentionView) mayDrop(k key) bool { return v.dropBy(k) != "" }

// dropBy is which rule may have dropped k (mayDrop): "ttl" when it may
// have been past the TTL (the cap may have taken it before), "cap" when
// only the cap can have, "" when retention must keep it or k was not held.
func (v *retentionView) dropBy(k key) string {
	ttl, cap := v.eligible(k)
	switch {
	case ttl:
		return "ttl"
	case cap:
		return "cap"
	}
	return ""
}

// eligible says whether the TTL, and whether the cap, may have dropped k:
// the TTL when k was first fetched more than the TTL (less ttlSlack)
// before its bot's held span ended, the cap when at least the cap of
// other held messages were last fetched while held no earlier than k was
// first fetched (the cap keeps the newest).
func (v *retentionView) eligible(k key) (ttl, cap bool) {
	if v == nil || v.bots[k.bot] == nil {
		return false, false
	}
	b := v.bots[k.bot]
	f, ok := b.first[k.event]
	if !ok {
		return false, false
	}
	return f.Before(b.until.Add(-v.ttl + ttlSlack)), b.newerThan(f)-1 >= v.cap // k's own last is among them
}

// newerThan counts the held messages whose last fetch while held is at or
// after t.
func (b *heldBacklog) newerThan(t time.Time) int {
	i, _ := slices.BinarySearchFunc(b.lasts, t, func(x, y time.Time) int { return x.Compare(y) })
	return len(b.lasts) - i
}

// storeGrace is how long after learning an outcome an engine may still be
// recording it: two store retries and a second.
func storeGrace(p judgeParams) time.Duration { return 2*p.StoreRetry + time.Second }
