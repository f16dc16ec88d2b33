// The workload: streams, bots and memberships, and the producer that feeds the upstream and changes the registry.

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// setupWorld registers the bots and the first memberships: every bot but
// bot-2 on the log stream, the first two on the timestamp stream. The last
// bot's key is published later; during the run bot-2 joins the timestamp
// stream and, from behind its head, the log stream; bot-1 leaves the log
// stream and rejoins it, and its secret rotates; bot-3 moves to a new URL
// (produce does those).
// The bots' answers by event are answerClass's.
func (h *harness) setupWorld() {
	h.up.AddStream(streamLog, engine.LogStream)
	h.up.AddStream(streamTimestamp, engine.TimestampStream)
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for i, b := range h.bots {
		hasKey := i != len(h.bots)-1
		h.reg.AddBot(protocol.Bot{ID: b.id, Secret: b64(b.secret), URL: b.url(), HasKey: hasKey})
		h.rec.keyless[b.id] = !hasKey
	}
	for i, b := range h.bots {
		if i != 2 {
			h.addMembershipLocked(streamLog, b.id, impl.Position{}, true)
		}
		if i < 2 {
			h.addMembershipLocked(streamTimestamp, b.id, impl.Position{}, true)
		}
	}
}

func (h *harness) addMembershipLocked(stream, bot string, from impl.Position, member bool) {
	kind := protocol.KindLog
	if stream == streamTimestamp {
		kind = protocol.KindTimestamp
	}
	h.reg.AddMembership(protocol.Membership{Stream: stream, Kind: kind, Bot: bot, From: protocol.FromPos(from), Member: member})
	h.rec.membershipLocked(stream, bot, from, member)
}

// produce emits events at the configured rate until ctx ends, seals the
// log stream's minipool, and makes the registry changes.
func (h *harness) produce(ctx context.Context) {
	rng := rand.New(rand.NewPCG(h.cfg.Seed, 0x9d0d))
	tick := time.NewTicker(time.Second / time.Duration(h.cfg.Rate))
	defer tick.Stop()
	seal := time.NewTicker(250 * time.Millisecond)
	defer seal.Stop()
	d := h.cfg.Duration
	rc := registryChanges(d)
	keyAt, keyLatest := h.start.Add(rc.key), h.start.Add(rc.keyLatest())
	joinAt, leaveAt := h.start.Add(rc.join), h.start.Add(rc.leave)
	backfillAt, rotateAt, rejoinAt := h.start.Add(rc.backfill), h.start.Add(rc.rotate), h.start.Add(rc.rejoin)
	moveAt := h.start.Add(rc.move)
	var keyDone, joinDone, leaveDone, backfillDone, rotateDone, rejoinDone, moveDone bool
	var lastLog impl.Position
	var logHist []impl.Position // the log stream's positions, for a join behind its head
	seq := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-seal.C:
			h.up.Seal(streamLog)
			continue
		case <-tick.C:
		}
		if ctx.Err() != nil {
			return // the fault phase is over: no event after it
		}
		now := time.Now()
		h.rec.mu.Lock()
		if !keyDone && now.After(keyAt) && h.heldEnoughLocked(now, keyLatest) {
			keyDone = true
			h.reg.PublishKey(h.bots[len(h.bots)-1].id)
			h.rec.keyPublishedLocked(h.bots[len(h.bots)-1].id)
			h.aimed(aimRegistry)
		}
		if !joinDone && now.After(joinAt) && len(h.bots) > 2 {
			joinDone = true
			h.addMembershipLocked(streamTimestamp, h.bots[2].id, impl.Position{Major: now.UnixMilli()}, true)
			h.aimed(aimRegistry)
		}
		if !leaveDone && now.After(leaveAt) {
			leaveDone = true
			h.addMembershipLocked(streamLog, h.bots[1].id, lastLog, false)
			h.aimed(aimRegistry)
		}
		if !rejoinDone && leaveDone && now.After(rejoinAt) {
			rejoinDone = true
			h.addMembershipLocked(streamLog, h.bots[1].id, lastLog, true)
			h.aimed(aimRegistry)
		}
		if !backfillDone && now.After(backfillAt) && len(h.bots) > 2 && len(logHist) > 0 {
			// From about a second behind the head: events the engine has
			// already passed with its cursor are owed to bot-2 now.
			backfillDone = true
			h.addMembershipLocked(streamLog, h.bots[2].id, logHist[max(0, len(logHist)-h.cfg.Rate)], true)
			h.aimed(aimRegistry)
		}
		if !moveDone && now.After(moveAt) && len(h.bots) > 3 {
			moveDone = true
			h.moveLocked(h.bots[3])
			h.aimed(aimRegistry)
		}
		if !rotateDone && now.After(rotateAt) {
			rotateDone = true
			h.rotateLocked(h.bots[1], rng)
			h.aimed(aimRegistry)
		}
		seq++
		stream, created := streamLog, now
		if rng.IntN(3) == 0 {
			// A producer with its own clock, up to half a second off.
			stream, created = streamTimestamp, now.Add(time.Duration(rng.Int64N(int64(time.Second)))-500*time.Millisecond)
			if rng.IntN(20) == 0 {
				// A late arrival: stamped well before events the engine
				// has already handed off (within its lookback).
				created = now.Add(-lateBy(h.cfg.Engine.TimestampLookback))
			}
		}
		id := fmt.Sprintf("ev-%d-%06d", h.cfg.Seed%1000, seq)
		payload := eventPayload(stream, seq, id, rng.Uint32())
		if pos, ok := h.up.Produce(stream, id, payload, created); ok {
			h.rec.producedLocked(stream, stream == streamLog, id, pos, payload)
			if stream == streamLog {
				lastLog = pos
				logHist = append(logHist, pos)
			}
		}
		h.rec.mu.Unlock()
	}
}

// rotationGrace is how long a bot accepts its old secret beside the new
// one after a rotation (PROTOCOL.md: "while the change reaches the
// engine"); an engine that signs with the old one after it fails
// signed-requests.
const rotationGrace = 5 * time.Second

// rotateLocked gives b a new secret: the registry lists it, the bot
// accepts both for rotationGrace (longer across a database fault:
// dropOldSecret), then only the new one.
func (h *harness) rotateLocked(b *bot, rng *rand.Rand) {
	fresh := make([]byte, 24)
	for i := range fresh {
		fresh[i] = byte(rng.Uint32())
	}
	old := b.secret
	if err := b.rcv.SetSecrets([][]byte{old, fresh}); err != nil {
		h.rec.harnessErrs = append(h.rec.harnessErrs, "rotating "+b.id+"'s secret: "+err.Error())
		return
	}
	b.secret = fresh
	h.reg.AddBot(protocol.Bot{ID: b.id, Secret: b64(fresh), URL: b.url(), HasKey: !h.rec.keyless[b.id] || !h.rec.keyAt[b.id].IsZero()})
	h.rec.rotations = append(h.rec.rotations, rotation{bot: b.id, at: time.Now()})
	afterFunc(h.after)(rotationGrace, func() { h.dropOldSecret(b, fresh) })
}

// dropOldSecret ends a rotation's grace, unless a database stall is on or
// ended less than rotationGrace ago: an engine stuck on its store may
// apply a registry change late (seen: the reference under a 20 s outage
// signed with the old secret 5 s after the rotation), and the grace is
// about the change reaching the engine, not about its store.
func (h *harness) dropOldSecret(b *bot, fresh []byte) {
	now := time.Now()
	var until time.Time
	h.rec.mu.Lock()
	for _, w := range h.rec.dbFaults {
		// Stalls only: after a cut the engine reconnects at once.
		if end := w.to.Add(rotationGrace); w.to.After(w.from) && !w.from.After(now) && end.After(now) && end.After(until) {
			until = end
		}
	}
	h.rec.mu.Unlock()
	if !until.IsZero() {
		afterFunc(h.after)(until.Sub(now), func() { h.dropOldSecret(b, fresh) })
		return
	}
	_ = b.rcv.SetSecrets([][]byte{fresh})
}

// lateBy is how far behind the head a late timestamp-stream event is
// stamped: half the declared lookback, at most 2s (a restart's replay
// still reaches it).
func lateBy(lookback time.Duration) time.Duration {
	return min(lookback/2, 2*time.Second)
}

// moveLocked moves b to a new URL: the registry lists it, the old one
// answers for rotationGrace more, then refuses connections.
func (h *harness) moveLocked(b *bot) {
	u, err := b.move(rotationGrace)
	if err != nil {
		h.rec.harnessErrs = append(h.rec.harnessErrs, "moving "+b.id+": "+err.Error())
		return
	}
	h.reg.AddBot(protocol.Bot{ID: b.id, Secret: b64(b.secret), URL: u, HasKey: !h.rec.keyless[b.id] || !h.rec.keyAt[b.id].IsZero()})
	h.rec.moves = append(h.rec.moves, rotation{bot: b.id, at: time.Now()})
}

// changeTimes are when produce changes the registry, as offsets into the
// fault phase. Plan reads them too: a kill aimed at a registry change is
// armed just before one.
type changeTimes struct {
	key, join, rotate, backfill, leave, move, rejoin time.Duration
}

func registryChanges(d time.Duration) changeTimes {
	// The key comes late: the held backlog passes the declared retention
	// cap and TTL many times over (ReferenceEngine), for retention-bounds.
	return changeTimes{key: min(d/4, 15*time.Second), join: d * 2 / 5, rotate: d * 9 / 20,
		backfill: d / 2, leave: d * 3 / 5, move: d * 7 / 10, rejoin: d * 4 / 5}
}

// keyLatest: the key waits for a held backlog (heldEnoughLocked) until
// the middle of the fault phase (the backfill's time), at the latest. With
// the default four bots the last takes part in no other registry change.
func (c changeTimes) keyLatest() time.Duration { return max(c.key, c.backfill) }

// heldEnoughLocked says whether the last bot's key may be published: the
// engine has been served at least twice the declared retention cap of the
// bot's events, the first of them a TTL and two cleanups ago, so the held
// backlog is one retention must cut by both rules. A loaded machine slows
// the engine's fetches; with the key at a fixed instant a run at load 12
// held nothing, and retention-bounds passed with nothing to judge. Without
// declared retention, or after latest, it does not wait.
func (h *harness) heldEnoughLocked(now, latest time.Time) bool {
	e := h.cfg.Engine
	if !h.cfg.Retention || !now.Before(latest) {
		return true
	}
	last := h.bots[len(h.bots)-1].id
	member := map[string]bool{}
	for stream, ms := range h.rec.streams {
		for _, m := range ms {
			if m.bot == last && m.member {
				member[stream] = true
			}
		}
	}
	var first time.Time
	n := 0
	for _, id := range h.rec.order {
		ev := h.rec.events[id]
		if !member[ev.stream] || len(ev.served) == 0 {
			continue
		}
		if n++; first.IsZero() || ev.served[0].Before(first) {
			first = ev.served[0]
		}
	}
	return n >= 2*e.RetentionMax && now.Sub(first) >= e.RetentionTTL+2*e.CleanupInterval
}

func (c changeTimes) all() []time.Duration {
	return []time.Duration{c.key, c.join, c.rotate, c.backfill, c.leave, c.move, c.rejoin}
}

// eventPayload is an event's body: valid JSON that no serialiser writes
// back byte for byte, so an engine that signs or sends a re-serialised
// body instead of the bytes it was given fails signed-requests (or
// no-phantom-delivery). Every payload mixes insignificant whitespace
// (compact after one key, spaced after another, a tab and a newline):
// JavaScript's JSON.stringify, Python's json.dumps and Go's json.Marshal
// each write it differently. Beside that, each event carries one of the
// shapes below by its sequence number (every shape within 5 events), so a
// short run reaches them all:
//
//	key order        keys in no sorted order (a sorting serialiser moves them)
//	escaped unicode  \u00e9, a surrogate pair and \/ (unescaped on output)
//	non-ASCII        raw UTF-8 (escaped by an ASCII-only serialiser)
//	numbers          1.0, 1e3, 1E+2, -0, 0.10 and an integer past 2^53
//	                 (rewritten or rounded by a float-based parser)
//	deep nesting     64 levels of arrays and objects
func eventPayload(stream string, seq int, id string, r uint32) []byte {
	b := fmt.Appendf(nil, "{\"stream\": %q,\"seq\":%d,\t\"id\" : %q,\n", stream, seq, id)
	switch seq % 5 {
	case 0:
		b = append(b, `"zulu":1, "alpha":2,"mike":{"yankee":true,"bravo":null},`...)
	case 1:
		b = append(b, `"esc":"caf\u00e9 \ud83d\ude00 a\/b \u0041\t",`...)
	case 2:
		b = append(b, `"text":"café – 日本語 😀 ß", "ключ":"значение",`...)
	case 3:
		b = append(b, `"nums":[1.0, 1e3,1E+2, -0, 0.10, 12345678901234567890, 2.50e-3],`...)
	case 4:
		b = append(b, `"deep":`...)
		for i := range payloadDepth {
			if i%2 == 0 {
				b = append(b, '[')
			} else {
				b = append(b, `{"d":`...)
			}
		}
		b = fmt.Appendf(b, "%d", seq)
		for i := payloadDepth - 1; i >= 0; i-- {
			if i%2 == 0 {
				b = append(b, ']')
			} else {
				b = append(b, '}')
			}
		}
		b = append(b, ',')
	}
	return fmt.Appendf(b, ` "r": %d }`+"\n", r)
}

// payloadDepth is how deep the nested payloads go: deeper than any
// re-serialisation keeps on one line, well within every JSON parser's
// default limit (Python's is about 1000).
const payloadDepth = 64

// Payload traits, as coverage names them; payloadTraits reads them from
// the bytes (not from the sequence number), so the coverage says what was
// on the wire.
var payloadTraitNames = []string{CovPayloadWhitespace, CovPayloadKeyOrder, CovPayloadEscaped, CovPayloadNonASCII, CovPayloadNumbers, CovPayloadDeep}

func payloadTraits(b []byte) []string {
	s := string(b)
	var out []string
	has := func(name string, ok bool) {
		if ok {
			out = append(out, name)
		}
	}
	has(CovPayloadWhitespace, strings.Contains(s, "\t") || strings.Contains(s, ": "))
	has(CovPayloadKeyOrder, strings.Contains(s, `"zulu":1, "alpha"`))
	has(CovPayloadEscaped, strings.Contains(s, `\u00e9`))
	has(CovPayloadNonASCII, strings.ContainsFunc(s, func(r rune) bool { return r > 0x7f }))
	has(CovPayloadNumbers, strings.Contains(s, "1e3"))
	has(CovPayloadDeep, strings.Contains(s, strings.Repeat(`[{"d":`, payloadDepth/2)))
	return out
}

// The answers the bots choose by event (bots.go), from the event's
// sequence number: every status class PROTOCOL.md's Webhooks section
// names is reached in a 20 s run at the default rate.
var (
	// permanentStatuses: impl.PermanentStatus, in the order the poisoned
	// events cycle through them.
	permanentStatuses = []int{400, 404, 405, 410, 413, 415, 422}
	// transientStatuses: client errors that are retried ("not now").
	transientStatuses = []int{408, 409, 425, 429}
	// doomedStatuses: what a doomed event's bot answers, by attempt: every
	// one retryable, so the message must reach max attempts.
	doomedStatuses = []int{503, 429, 500, 408}
)

// The answer classes of an event (seqOf reads its sequence number).
const (
	answerNormal    = iota
	answerPermanent // every bot but bot-0: a permanent status, every time
	answerTransient // every bot but bot-0: a retryable 4xx to the first transientTries requests, then normal
	answerDoomed    // every bot but bot-0: a retryable failure to every request (max attempts, then dead)
)

// transientTries is how many requests of a transient event a bot answers
// with its 4xx before it takes it.
const transientTries = 2

// answerClass says how the bots other than bot-0 (the healthy witness)
// answer an event, and with what status: ids ending in 07 or 57 are
// poisoned (a permanent status, cycling through permanentStatuses every
// 50 events: all seven by event 307, about 15 s in at 20 events/s);
// ending in 13, 38, 63, 88 transient; ending in 41 doomed (one in a
// hundred, the first about 2 s in).
func answerClass(id string) (class, status int) {
	seq, ok := seqOf(id)
	if !ok {
		return answerNormal, 0
	}
	switch r := seq % 100; {
	case r == 7 || r == 57:
		return answerPermanent, permanentStatuses[(seq/50)%len(permanentStatuses)]
	case r%25 == 13:
		return answerTransient, transientStatuses[(seq/25)%len(transientStatuses)]
	case r == 41:
		return answerDoomed, 0
	}
	return answerNormal, 0
}

// RetriedByWorkload reports whether the workload's bots other than bot-0
// answer event id's first requests with a retryable 4xx, on every run
// whatever its timing (answerClass): a test can count on such an event
// having failed attempts to retry.
func RetriedByWorkload(id string) bool {
	c, _ := answerClass(id)
	return c == answerTransient
}

// seqOf is the sequence number at the end of an event id (ev-S-NNNNNN).
func seqOf(id string) (int, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	return n, err == nil
}
