// retention-bounds (PROTOCOL.md, "Rules judged with the declared
// settings"): seed 003's retention of the messages held for a bot without
// a key, judged from the wire with the declared TTL, cap and cleanup
// interval. What retention may drop is mayDrop's (rules.go), the one rule
// the settle, no-silent-loss, liveness and the report use too.

package chaos

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// cleanupSlack: a cleanup may come this much later than its declared
// interval (a loaded machine, a store call of its own).
const cleanupSlack = time.Second

// retentionBounds judges each keyless bot's held backlog: nothing that
// retention may not drop is missing (protected), nothing the TTL surely
// dropped reaches the bot (overdue), and the engine's retention_drops
// cover what is missing (counted). Cases: held messages whose fate the
// rule decided (protected and handled, or surely past the TTL).
func (r *recorder) retentionBounds(p judgeParams) (out []oracle.Violation, cases int) {
	v := r.retentionView(p)
	sent := r.sentKeys()
	for _, bot := range slices.Sorted(maps.Keys(v.bots)) {
		vs, n := r.backlogBounds(v, bot, sent, p)
		out, cases = append(out, vs...), cases+n
	}
	out = append(out, r.retentionOfKeyed(v)...)
	return out, cases
}

// backlogBounds judges one keyless bot's held backlog (retentionBounds).
func (r *recorder) backlogBounds(v *retentionView, bot string, sent map[key]bool, p judgeParams) (out []oracle.Violation, cases int) {
	b := v.bots[bot]
	var c backlogCount
	for _, id := range r.order {
		f, ok := b.first[id]
		if !ok {
			continue
		}
		k := key{bot, id}
		_, handled := r.firstHandled[k]
		ttl, cap := v.eligible(k)
		c.add(ttl, cap, r.servesBefore(id, b.until))
		switch may := ttl || cap; {
		case !may && !handled && !sent[k]:
			out = append(out, r.violation(oracle.InvRetentionBounds, bot, id,
				"held for the bot (first fetched %s, the engine may have held the bot until %s) and never sent: it was younger than the declared TTL %s and within the newest %d held messages, which retention must keep",
				r.rel(f), r.rel(b.until), v.ttl, v.cap))
		case !may && handled:
			cases++
		case may && !handled && !sent[k]:
			c.missing = append(c.missing, id)
		}
		if vs, judged := r.keptPastTTL(k, b, sent, p); judged {
			out, cases = append(out, vs...), cases+1
		}
	}
	out = append(out, r.newestKept(bot, b, c.missing, sent)...)
	return append(out, r.retentionCounted(bot, c)...), cases
}

// backlogCount is what the wire shows of one bot's held backlog for its
// reported drops: the messages never sent that retention may have dropped,
// and the fetches while held of those the TTL, and of those the cap, may
// have dropped (each fetch may have stored it again after a drop).
type backlogCount struct {
	missing              []string
	ttlServes, capServes int
}

func (c *backlogCount) add(ttl, cap bool, serves int) {
	if ttl {
		c.ttlServes += serves
	}
	if cap {
		c.capServes += serves
	}
}

// newestKept: retention drops the oldest (by TTL or cap), so what it
// dropped of a backlog is everything up to some point: a held message
// never sent while one surely older (last fetched before it was first
// fetched, and not fetched again after the held span) was sent breaks it.
// Judged only when the engine reports nothing still queued after the
// settle (which does not wait for what retention may drop, so a kept
// message could still be on its way).
func (r *recorder) newestKept(bot string, b *heldBacklog, missing []string, sent map[key]bool) []oracle.Violation {
	if o := r.retentionReading(); o == nil || o.QueueDepth == nil || *o.QueueDepth != 0 || len(missing) == 0 {
		return nil
	}
	var older string
	for id := range b.first {
		if sent[key{bot, id}] && r.servesBefore(id, b.until) == len(r.events[id].served) && (older == "" || b.last[id].Before(b.last[older])) {
			older = id
		}
	}
	if older == "" {
		return nil
	}
	n, newest := 0, ""
	for _, id := range missing {
		if b.first[id].After(b.last[older]) {
			n++
			newest = id
		}
	}
	if n == 0 {
		return nil
	}
	return []oracle.Violation{r.violation(oracle.InvRetentionBounds, bot, newest,
		"%d held messages never reached the bot (the newest of them %s, first fetched %s), but an older one, %s (last fetched %s), was sent: retention must drop the oldest and keep the newest",
		n, newest, r.rel(b.first[newest]), older, r.rel(b.last[older]))}
}

// keptPastTTL: a held message surely past the TTL while held (overdue)
// must not be sent. A message served again after the held span (a replay
// after a restart) may be stored anew and sent: only the held span is
// judged. judged reports whether k was surely past the TTL.
func (r *recorder) keptPastTTL(k key, b *heldBacklog, sent map[key]bool, p judgeParams) (out []oracle.Violation, judged bool) {
	if r.servesBefore(k.event, b.until) < len(r.events[k.event].served) {
		return nil, false
	}
	at, ok := r.overdue(k.bot, b.last[k.event], p)
	if !ok {
		return nil, false
	}
	if sent[k] {
		out = append(out, r.violation(oracle.InvRetentionBounds, k.bot, k.event,
			"sent to the bot although it was older than the declared TTL %s at %s, with the engine up and its store healthy for a cleanup interval (%s, and %s of slack) after that while the bot was still held: its retention kept a message past the TTL",
			p.Declared.RetentionTTL, r.rel(at), p.Declared.CleanupInterval, cleanupSlack))
	}
	return out, true
}

// sentKeys are the (bot, event) pairs with a request on the wire.
func (r *recorder) sentKeys() map[key]bool {
	sent := map[key]bool{}
	for _, q := range r.requests {
		sent[key{q.bot, q.event}] = true
	}
	return sent
}

// servesBefore counts the upstream's serves of id before t: each may have
// enqueued it once more after a drop.
func (r *recorder) servesBefore(id string, t time.Time) int {
	n := 0
	for _, s := range r.events[id].served {
		if s.Before(t) {
			n++
		}
	}
	return n
}

// overdue: a message last fetched at last was surely past the TTL while
// its bot was held and a cleanup surely ran: from last plus the time to
// enqueue it (storeGrace), the TTL and ttlSlack on, one process stayed up
// and its database healthy for a cleanup interval and cleanupSlack,
// before the key was published. It returns where that span starts.
func (r *recorder) overdue(bot string, last time.Time, p judgeParams) (time.Time, bool) {
	keyAt, ok := r.keyAt[bot]
	if !ok || last.IsZero() {
		return time.Time{}, false
	}
	span := p.Declared.CleanupInterval + cleanupSlack
	from := last.Add(storeGrace(p) + p.Declared.RetentionTTL + ttlSlack)
	starts := []time.Time{from}
	for _, k := range r.kills {
		if !k.up.IsZero() && k.up.After(from) {
			starts = append(starts, k.up)
		}
	}
	for _, w := range r.dbFaults {
		if t := w.to.Add(storeGrace(p)); t.After(from) {
			starts = append(starts, t)
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for _, s := range starts {
		end := s.Add(span)
		if end.After(keyAt) {
			break
		}
		if r.upAndHealthy(s, end, p) {
			return s, true
		}
	}
	return time.Time{}, false
}

// upAndHealthy: no kill, restart or database fault (widened by
// storeGrace) touches [from, to].
func (r *recorder) upAndHealthy(from, to time.Time, p judgeParams) bool {
	for _, k := range r.kills {
		up := k.up
		if up.IsZero() {
			up = to // never started again
		}
		if !k.at.After(to) && !up.Before(from) {
			return false
		}
	}
	return !r.dbFaultIn(from, to, storeGrace(p))
}

// retentionReading is the last reading of the observation endpoint that
// listed retention_drops (nil: the engine reports none).
func (r *recorder) retentionReading() *protocol.Observation {
	for _, o := range []*protocol.Observation{r.atEnd, r.atHeal} {
		if o != nil && o.RetentionDrops != nil {
			return o
		}
	}
	return nil
}

// retentionCounted: the bot's reported drops are at least the held
// messages missing from the wire (less the messages the engine still
// reports queued, which may be some of them), its ttl drops at most the
// fetches while held of the messages the TTL may drop, and its cap drops
// at most those of the messages the cap may drop. Without
// retention_drops on /v1/observe the count is not judged: the declared
// settings alone say what may be missing.
func (r *recorder) retentionCounted(bot string, c backlogCount) []oracle.Violation {
	o := r.retentionReading()
	if o == nil {
		return nil
	}
	var d protocol.RetentionDrop
	for _, x := range o.RetentionDrops {
		if x.Bot == bot {
			d = x
		}
	}
	queued := 0
	if o.QueueDepth != nil {
		queued = *o.QueueDepth
	}
	var out []oracle.Violation
	if d.TTL+d.Cap+int64(queued) < int64(len(c.missing)) {
		out = append(out, r.violation(oracle.InvRetentionBounds, bot, "",
			"%d held messages never reached the bot, but /v1/observe reports %d retention drops for it (and %d messages still queued): drops must be counted", len(c.missing), d.TTL+d.Cap, queued))
	}
	if d.TTL > int64(c.ttlServes) {
		out = append(out, r.violation(oracle.InvRetentionBounds, bot, "",
			"/v1/observe reports %d drops by the TTL for the bot, more than the %d fetches while held of the messages older than the declared TTL before its held span ended: it dropped messages younger than the TTL", d.TTL, c.ttlServes))
	}
	if d.Cap > int64(c.capServes) {
		out = append(out, r.violation(oracle.InvRetentionBounds, bot, "",
			"/v1/observe reports %d drops by the cap for the bot, more than the %d fetches while held of the messages with at least the cap of newer held messages: it dropped messages within the cap", d.Cap, c.capServes))
	}
	return out
}

// retentionOfKeyed: retention touches only held messages, so a bot that
// had its key from the start reports no drop.
func (r *recorder) retentionOfKeyed(v *retentionView) []oracle.Violation {
	o := r.retentionReading()
	if o == nil {
		return nil
	}
	var out []oracle.Violation
	for _, d := range o.RetentionDrops {
		if _, held := v.bots[d.Bot]; !held && !r.keyless[d.Bot] && d.TTL+d.Cap > 0 {
			out = append(out, r.violation(oracle.InvRetentionBounds, d.Bot, "",
				"/v1/observe reports %d retention drops (ttl %d, cap %d) for a bot that had its key from the start: retention applies to held messages only", d.TTL+d.Cap, d.TTL, d.Cap))
		}
	}
	return out
}

// retentionWhy is why retention-bounds is not judged ("" when it is).
func retentionWhy(p judgeParams) string {
	if !p.Retention {
		return "the engine declares no retention of held messages (chaos --retention declared)"
	}
	return ""
}
