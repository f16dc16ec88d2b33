// Coverage: the situations of PROTOCOL.md a chaos run reached, and how
// often, counted from what the harness saw (the wire, the upstream's
// answers, the registry's history, the kills it carried out), never from
// what the engine says about itself. A PASS says nothing about a rule the
// run never reached; the report says which those were, and why.

package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
)

// Situation is one entry of a run's coverage: how often the run reached
// it, and, when it did not, why (what the run would need to).
type Situation struct {
	Name  string `json:"name"`
	Doc   string `json:"doc"`
	Count int    `json:"count"`
	// Why: when Count is 0, why this run could not reach it (a plan or
	// workload without room for it) or that it could and did not.
	Why string `json:"why_not_reached,omitempty"`
}

// Situation names, stable: they appear in reports and JSON.
const (
	CovPayloadWhitespace = "payload/insignificant-whitespace"
	CovPayloadKeyOrder   = "payload/unsorted-keys"
	CovPayloadEscaped    = "payload/escaped-unicode"
	CovPayloadNonASCII   = "payload/raw-non-ascii"
	CovPayloadNumbers    = "payload/number-forms"
	CovPayloadDeep       = "payload/deep-nesting"

	covPermanentPrefix  = "webhook/permanent-"       // + status
	covTransientPrefix  = "webhook/retryable-4xx-"   // + status + "-then-handled"
	CovRetryable5xx     = "webhook/5xx-then-handled" //
	CovRefusedHandled   = "webhook/refused-then-handled"
	CovTimeoutResent    = "webhook/answer-after-timeout-then-sent-again"
	CovDuplicated       = "webhook/duplicated-request"
	CovMaxAttempts      = "webhook/max-attempts-of-retryable-failures"
	CovLongBotOutage    = "webhook/bot-outage-longer-than-the-retry-schedule"
	CovKeyHeld          = "registry/held-for-a-key-then-handled"
	CovJoinHandled      = "registry/join-then-handled"
	CovBackfillHandled  = "registry/backfill-behind-the-head-handled"
	CovRejoinHandled    = "registry/leave-rejoin-then-handled"
	CovRotatedHandled   = "registry/rotated-secret-then-handled"
	CovMovedHandled     = "registry/moved-url-then-handled"
	CovLateArrival      = "upstream/timestamp-late-arrival-handled"
	CovServedAgain      = "upstream/event-served-again-after-a-restart"
	CovKillRandom       = "kill/random-instant"
	CovKillUpstream     = "kill/just-after-an-upstream-answer"
	CovKillOK           = "kill/just-after-a-2xx"
	CovKillRegistry     = "kill/registry-change-not-yet-applied"
	CovKillLongDowntime = "kill/downtime-beyond-lookback-and-lease"
	CovKillInFlight     = "kill/request-in-flight"
	CovDBFault          = "db/cut-or-stall"
	CovRetentionTTL     = "retention/held-past-the-ttl-dropped"
	CovRetentionCap     = "retention/held-beyond-the-cap-dropped"
	CovRetentionAtCap   = "retention/newest-cap-held-kept-whole"
)

// coverageCatalogue lists every situation, in report order, with its doc.
func coverageCatalogue() []Situation {
	var cs []Situation
	add := func(name, doc string) { cs = append(cs, Situation{Name: name, Doc: doc}) }
	for _, st := range permanentStatuses {
		add(fmt.Sprintf("%s%d", covPermanentPrefix, st), fmt.Sprintf("a bot answered the engine's request %d, a permanent status (PROTOCOL.md, Webhooks): dead-lettered at once or retried up to max attempts, never for ever", st))
	}
	for _, st := range transientStatuses {
		add(fmt.Sprintf("%s%d-then-handled", covTransientPrefix, st), fmt.Sprintf("a bot answered %d, which is retried, and later handled the message (an engine that dead-letters it at once loses it)", st))
	}
	add(CovRetryable5xx, "a bot answered 5xx and later handled the message")
	add(CovRefusedHandled, "a bot refused connections while it was owed a message, and handled it after the window")
	add(CovTimeoutResent, "a bot answered after the engine's webhook timeout (its handler ran) and the engine sent the message again (the bot deduplicates)")
	add(CovDuplicated, "the network delivered one of the engine's requests twice (the bot deduplicates)")
	add(CovMaxAttempts, "a message was answered max-attempts retryable failures and no 2xx or permanent status: it must be dead-lettered after exactly max attempts (judged with /v1/observe by dead-letter-earned, without it on the wire's word)")
	add(CovLongBotOutage, "a bot answered 5xx for longer than the declared retry schedule")
	for _, n := range payloadTraitNames {
		add(n, "a payload with "+strings.TrimPrefix(n, "payload/")+" (valid JSON that no serialiser writes back byte for byte) reached a handler: the body and its signature are the bytes given")
	}
	add(CovKeyHeld, "an event produced while its bot had no published key reached that bot after the key was published")
	add(CovJoinHandled, "a bot that joined a stream during the run handled an event after its join")
	add(CovBackfillHandled, "a bot that joined a stream from behind its head handled an event produced before the join (backfill)")
	add(CovRejoinHandled, "a bot that left a stream and rejoined it handled an event produced after the rejoin")
	add(CovRotatedHandled, "a bot whose secret rotated handled a request after its old secret was dropped")
	add(CovMovedHandled, "a bot that moved to a new URL handled a request after its old URL stopped answering")
	add(CovLateArrival, "a timestamp-stream event that arrived after an event with a later position was handled")
	add(CovServedAgain, "the upstream served an event to the engine both before and after a kill (a resume replays)")
	add(CovKillRandom, "the engine was SIGKILLed at a random instant")
	add(CovKillUpstream, "the engine was SIGKILLed at one of its first store writes (database answers or state-file writes) after an upstream answer with events was served to it: mid hand-off, where a cursor made durable before its deliveries loses them")
	add(CovKillOK, "the engine was SIGKILLed at one of its first store writes after a bot answered it 2xx: mid record of the delivery")
	add(CovKillRegistry, "the engine was SIGKILLed at one of its first store writes after a registry change (a join, leave, rotation, move or key), before or while applying it")
	add(CovKillLongDowntime, "the engine stayed down after a kill for longer than the timestamp lookback and the lease: its durable cursors were old at the restart")
	add(CovKillInFlight, "the engine was SIGKILLed with a webhook request of its own still unanswered")
	add(CovDBFault, "the engine's database connections were cut or stalled")
	add(CovRetentionTTL, "a message held for a bot without a key, older than the declared retention TTL while held, never reached the bot (retention-bounds: a drop the TTL, or the cap before it, may make)")
	add(CovRetentionCap, "a message held for a bot without a key, younger than the TTL but beyond the newest cap held messages, never reached the bot (only the cap can drop it)")
	add(CovRetentionAtCap, "a bot's held backlog grew past the cap, and every one of its newest cap held messages (the backlog exactly at the cap) that was younger than the TTL was sent to it after its key was published")
	return cs
}

// coverage counts the situations this run reached (with r.mu held).
func (h *harness) coverage(plan []faults.Fault) []Situation {
	r := h.rec
	cs := coverageCatalogue()
	counts := map[string]int{}
	reqs := r.byKey()
	maxA := h.cfg.Engine.MaxAttempts
	for k, qs := range reqs {
		_, handled := r.firstHandled[k]
		perm, fails := false, 0
		seen := map[string]bool{}
		for i, q := range qs {
			switch {
			case q.outcome == outStatus && impl.PermanentStatus(q.status):
				perm = true
				seen[fmt.Sprintf("%s%d", covPermanentPrefix, q.status)] = true
			case q.outcome == outStatus && q.status >= 400 && q.status < 500:
				fails++
				if handled {
					seen[fmt.Sprintf("%s%d-then-handled", covTransientPrefix, q.status)] = true
				}
			case q.outcome == outStatus && q.status >= 500:
				fails++
				if handled {
					seen[CovRetryable5xx] = true
				}
			case q.outcome == outReset:
				fails++ // a refused connection: an attempt (PROTOCOL.md)
			case q.outcome == outTimeout:
				fails++
				if i < len(qs)-1 {
					seen[CovTimeoutResent] = true
				}
			}
		}
		if maxA > 0 && fails >= maxA && !perm && !handled {
			seen[CovMaxAttempts] = true
		}
		for n := range seen {
			counts[n]++
		}
	}
	counts[CovDuplicated] = r.dups

	// What reached a handler, by payload and by registry history.
	last := ""
	if len(r.bots) > 0 {
		last = r.bots[len(r.bots)-1]
	}
	joinedAt := func(stream, bot string, member bool, nth int) (time.Time, bool) {
		n := 0
		for _, m := range r.streams[stream] {
			if m.bot == bot && m.member == member && !m.at.Before(r.start) {
				if n == nth {
					return m.at, true
				}
				n++
			}
		}
		return time.Time{}, false
	}
	tsJoin, tsJoined := joinedAt(streamTimestamp, "bot-2", true, 0)
	backfillAt, backfilled := joinedAt(streamLog, "bot-2", true, 0)
	rejoinAt, rejoined := joinedAt(streamLog, "bot-1", true, 0)
	for k, at := range r.firstHandled {
		e := r.events[k.event]
		if e == nil {
			continue
		}
		for _, t := range payloadTraits(e.payload) {
			counts[t]++
		}
		switch {
		case k.bot == last && r.keyless[last] && e.at.Before(r.keyAt[last]):
			counts[CovKeyHeld]++
		}
		if k.bot == "bot-2" && e.stream == streamTimestamp && tsJoined && e.at.After(tsJoin) {
			counts[CovJoinHandled]++
		}
		if k.bot == "bot-2" && e.stream == streamLog && backfilled && e.at.Before(backfillAt) {
			counts[CovBackfillHandled]++
		}
		if k.bot == "bot-1" && e.stream == streamLog && rejoined && e.at.After(rejoinAt) {
			counts[CovRejoinHandled]++
		}
		for _, rot := range r.rotations {
			if k.bot == rot.bot && at.After(rot.at.Add(rotationGrace)) {
				counts[CovRotatedHandled]++
			}
		}
		for _, mv := range r.moves {
			if k.bot == mv.bot && at.After(mv.at.Add(rotationGrace)) {
				counts[CovMovedHandled]++
			}
		}
	}
	for _, f := range r.botFaults {
		if f.mode != modeRefuse {
			continue
		}
		for k, at := range r.firstHandled {
			if e := r.events[k.event]; k.bot == f.bot && e != nil && e.at.Before(f.w.to) && at.After(f.w.to) {
				counts[CovRefusedHandled]++
			}
		}
	}
	l := longOutage(h.cfg.Engine)
	for _, f := range plan {
		if f.Kind == faults.Webhook5xx && l > 0 && f.Until-f.At >= l {
			counts[CovLongBotOutage]++
		}
	}

	// The upstream: late arrivals (position order is not arrival order)
	// that reached a handler, and events served on both sides of a kill.
	var top impl.Position
	for _, id := range r.order {
		e := r.events[id]
		if e.stream != streamTimestamp {
			continue
		}
		if e.pos.Compare(top) < 0 {
			for _, b := range r.bots {
				if _, ok := r.firstHandled[key{b, id}]; ok {
					counts[CovLateArrival]++
					break
				}
			}
		} else {
			top = e.pos
		}
	}
	for _, e := range r.events {
		for _, k := range h.kills {
			if len(e.served) > 1 && e.served[0].Before(k.at) && e.served[len(e.served)-1].After(k.up) {
				counts[CovServedAgain]++
				break
			}
		}
	}

	// Kills, by what they were aimed at and hit.
	for _, k := range h.kills {
		switch k.aim {
		case "":
			counts[CovKillRandom]++
		case aimUpstream:
			counts[CovKillUpstream]++
		case aimOK:
			counts[CovKillOK]++
		case aimRegistry:
			counts[CovKillRegistry]++
		}
		if k.up.Sub(k.at) >= longDowntime(h.cfg.Engine) {
			counts[CovKillLongDowntime]++
		}
		for _, q := range r.requests {
			if q.at.Before(k.at) && (q.answered.IsZero() || q.answered.After(k.at)) {
				counts[CovKillInFlight]++
				break
			}
		}
	}
	counts[CovDBFault] = len(r.dbFaults)
	r.retentionCoverage(h.judgeParams(), counts)

	for i := range cs {
		cs[i].Count = counts[cs[i].Name]
		if cs[i].Count == 0 {
			cs[i].Why = h.whyNot(cs[i].Name, plan)
		}
	}
	return cs
}

// keyCovered: a 5xx window of the last bot longer than the retry schedule
// covers the publication of its key (registryChanges) or starts less than
// keyClear after it, leaving the held messages no room to be handled.
func keyCovered(c Config, plan []faults.Fault) bool {
	last := fmt.Sprintf("bot-%d", c.Bots-1)
	key := registryChanges(c.Duration).key
	l := longOutage(c.Engine)
	return slices.ContainsFunc(plan, func(f faults.Fault) bool {
		return f.Kind == faults.Webhook5xx && f.Bot == last && l > 0 && f.Until-f.At >= l && f.At < key+keyClear && f.Until > key
	})
}

// whyNot says why a situation was not reached: what the run's plan or
// workload lacked for it, or that it had room and the run did not get
// there (worth a look: a slow engine, or a workload gap).
func (h *harness) whyNot(name string, plan []faults.Fault) string {
	c, r := h.cfg, h.rec
	produced := len(r.order)
	hasKill := func(aim string) bool {
		return slices.ContainsFunc(plan, func(f faults.Fault) bool { return f.Kind == faults.Crash && f.After == aim })
	}
	hasBot := func(k faults.Kind) bool {
		return slices.ContainsFunc(plan, func(f faults.Fault) bool { return f.Kind == k })
	}
	needEvents := func(seq int) string {
		if produced < seq+1 {
			return fmt.Sprintf("does not fit: it needs event %d (%.0f s at --rate %d); this run produced %d", seq, float64(seq)/float64(c.Rate), c.Rate, produced)
		}
		return ""
	}
	switch {
	case strings.HasPrefix(name, covPermanentPrefix):
		var st int
		fmt.Sscanf(strings.TrimPrefix(name, covPermanentPrefix), "%d", &st)
		if i := slices.Index(permanentStatuses, st); i >= 0 {
			if w := needEvents(i*50 + 7); w != "" {
				return w
			}
		}
	case strings.HasPrefix(name, covTransientPrefix):
		var st int
		fmt.Sscanf(strings.TrimPrefix(name, covTransientPrefix), "%d", &st)
		if i := slices.Index(transientStatuses, st); i >= 0 {
			if w := needEvents(i*25 + 13); w != "" {
				return w
			}
		}
	case name == CovMaxAttempts:
		if w := needEvents(41); w != "" {
			return w
		}
	case name == CovKillRandom && c.Kills == 0, name == CovKillInFlight && c.Kills == 0:
		return "does not fit: --kills 0"
	case name == CovKillUpstream && !hasKill(aimUpstream), name == CovKillOK && !hasKill(aimOK), name == CovKillRegistry && !hasKill(aimRegistry):
		return fmt.Sprintf("does not fit: the plan has no kill aimed there (--kills %d: all but the first of every four are aimed, cycling through %s)", c.Kills, strings.Join(aims, ", "))
	case name == CovKillLongDowntime && !longDowntimeFits(c):
		return fmt.Sprintf("does not fit: a downtime of %s (the lookback or the lease, plus 3 s) needs a kill and a fault phase of at least %s", longDowntime(c.Engine), longDowntime(c.Engine)*5/2)
	case strings.HasPrefix(name, "retention/") && !c.Retention:
		return "does not fit: the engine declares no retention (chaos --retention declared)"
	case name == CovDBFault && c.DBCuts == 0 && c.Outage == 0:
		return "does not fit: --db-cuts 0"
	case name == CovLongBotOutage && !hasBot(faults.Webhook5xx):
		return "does not fit: the plan has no 5xx window"
	case name == CovLongBotOutage && !longOutageFits(c):
		return fmt.Sprintf("does not fit: a bot outage longer than the retry schedule (%s) starts %s after the last bot's key is published and ends a tenth before the fault phase does; --duration %s has no room for it", longOutage(c.Engine), keyClear, c.Duration)
	case name == CovKeyHeld && keyCovered(c, plan):
		return fmt.Sprintf("does not fit: a 5xx window of the last bot covers its key publication and the %s after it, so every held message fails into it", keyClear)
	case name == CovRefusedHandled && !hasBot(faults.WebhookRefused), name == CovTimeoutResent && !hasBot(faults.WebhookTimeout),
		name == CovDuplicated && !hasBot(faults.WebhookDuplicate), name == CovRetryable5xx && !hasBot(faults.Webhook5xx):
		return fmt.Sprintf("does not fit: the plan has no window of that bot fault (--bot-faults %d)", c.BotFaults)
	case (name == CovMovedHandled && c.Bots < 4) || ((name == CovJoinHandled || name == CovBackfillHandled) && c.Bots < 3):
		return fmt.Sprintf("does not fit: --bots %d", c.Bots)
	}
	if len(c.Faults) > 0 {
		return "not reached (--faults limits the plan)"
	}
	return "not reached although the run had room for it"
}

// retentionCoverage counts the held messages retention may have dropped
// that never reached their bot, by the rule that can have (dropBy), and
// the held backlogs whose newest cap messages were all sent; r.mu is held.
func (r *recorder) retentionCoverage(p judgeParams, counts map[string]int) {
	v := r.retentionView(p)
	if v == nil {
		return
	}
	sent := r.sentKeys()
	for bot, b := range v.bots {
		kept, whole := 0, true
		for id := range b.first {
			k := key{bot, id}
			_, handled := r.firstHandled[k]
			switch rule := v.dropBy(k); {
			case rule == "ttl" && !handled && !sent[k]:
				counts[CovRetentionTTL]++
			case rule == "cap" && !handled && !sent[k]:
				counts[CovRetentionCap]++
			case rule == "":
				kept++
				whole = whole && sent[k]
			}
		}
		if whole && kept > 0 && len(b.first) > v.cap {
			counts[CovRetentionAtCap]++
		}
	}
}
