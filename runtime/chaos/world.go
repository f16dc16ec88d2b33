// The workload: streams, bots and memberships, and the producer that feeds the upstream and changes the registry.

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// bot-2 answers a permanent 400 to its poisoned events (poisoned).
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
	// The key comes late, but not so late that the held messages reach
	// the engine's per-bot retention cap: the harness does not observe
	// retention drops (it cannot tell them from losses on the wire), so
	// the workload must not cause them.
	keyAt := h.start.Add(min(d/4, 15*time.Second))
	joinAt, leaveAt := h.start.Add(d*2/5), h.start.Add(d*3/5)
	backfillAt, rotateAt, rejoinAt := h.start.Add(d/2), h.start.Add(d*9/20), h.start.Add(d*4/5)
	moveAt := h.start.Add(d * 7 / 10)
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
		if !keyDone && now.After(keyAt) {
			keyDone = true
			h.reg.PublishKey(h.bots[len(h.bots)-1].id)
			h.rec.keyPublishedLocked(h.bots[len(h.bots)-1].id)
		}
		if !joinDone && now.After(joinAt) && len(h.bots) > 2 {
			joinDone = true
			h.addMembershipLocked(streamTimestamp, h.bots[2].id, impl.Position{Major: now.UnixMilli()}, true)
		}
		if !leaveDone && now.After(leaveAt) {
			leaveDone = true
			h.addMembershipLocked(streamLog, h.bots[1].id, lastLog, false)
		}
		if !rejoinDone && leaveDone && now.After(rejoinAt) {
			rejoinDone = true
			h.addMembershipLocked(streamLog, h.bots[1].id, lastLog, true)
		}
		if !backfillDone && now.After(backfillAt) && len(h.bots) > 2 && len(logHist) > 0 {
			// From about a second behind the head: events the engine has
			// already passed with its cursor are owed to bot-2 now.
			backfillDone = true
			h.addMembershipLocked(streamLog, h.bots[2].id, logHist[max(0, len(logHist)-h.cfg.Rate)], true)
		}
		if !moveDone && now.After(moveAt) && len(h.bots) > 3 {
			moveDone = true
			h.moveLocked(h.bots[3])
		}
		if !rotateDone && now.After(rotateAt) {
			rotateDone = true
			h.rotateLocked(h.bots[1], rng)
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
		payload := fmt.Appendf(nil, `{"stream":%q,"seq":%d,"id":%q,"r":%d}`, stream, seq, id, rng.Uint32())
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
	time.AfterFunc(rotationGrace, func() { h.dropOldSecret(b, fresh) })
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
		time.AfterFunc(until.Sub(now), func() { h.dropOldSecret(b, fresh) })
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

// poisoned: the events a poisoning bot (bot-2 in a run) answers with a
// permanent 400 (about 1 in 50), so that their messages reach the
// engine's max attempts at any setting: an engine that never dead-letters
// fails bounded-retry.
func poisoned(id string) bool {
	return strings.HasSuffix(id, "07") || strings.HasSuffix(id, "57")
}
