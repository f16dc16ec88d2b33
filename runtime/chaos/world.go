// The workload: streams, bots and memberships, and the producer that feeds the upstream and changes the registry.

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// setupWorld registers the bots and the first memberships: every bot on
// the log stream, the first two on the timestamp stream. The last bot's
// key is published later; one bot joins the timestamp stream and one
// leaves the log stream during the run (produce does those).
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
		h.addMembershipLocked(streamLog, b.id, impl.Position{}, true)
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
	var keyDone, joinDone, leaveDone bool
	var lastLog impl.Position
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
		seq++
		stream, created := streamLog, now
		if rng.IntN(3) == 0 {
			// A producer with its own clock, up to half a second off.
			stream, created = streamTimestamp, now.Add(time.Duration(rng.Int64N(int64(time.Second)))-500*time.Millisecond)
		}
		id := fmt.Sprintf("ev-%d-%06d", h.cfg.Seed%1000, seq)
		payload := fmt.Appendf(nil, `{"stream":%q,"seq":%d,"id":%q,"r":%d}`, stream, seq, id, rng.Uint32())
		if pos, ok := h.up.Produce(stream, id, payload, created); ok {
			h.rec.producedLocked(stream, stream == streamLog, id, pos, payload)
			if stream == streamLog {
				lastLog = pos
			}
		}
		h.rec.mu.Unlock()
	}
}
