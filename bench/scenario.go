package bench

import (
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/sim"
)

// Week is the standard simulator scenario for speed measurements: a
// simulated week of traffic to 1000 bots with seed 003's retention (7-day
// TTL, 1000 messages per bot, cleanup every 5 minutes, so about 2000
// cleanups). 20 log streams carry 5000 events, each stream to 50 bots
// (250,000 deliveries); 2% of the bots publish their key late, up to half
// a day after the traffic ends, so their oldest messages outlive the TTL
// and are dropped by retention. No other faults: it measures the
// simulator, not the fault mix.
func Week() (sim.Workload, faults.Plan) {
	const (
		bots    = 1000
		streams = 20
		events  = 5000
		week    = 7 * 24 * time.Hour
	)
	w := sim.Workload{
		Nodes:           1,
		Produce:         week,
		FaultWindow:     week + 12*time.Hour,
		Liveness:        30 * time.Minute,
		HOLBound:        2 * time.Minute,
		BatchMax:        16,
		CursorMode:      engine.CursorSync,
		MaxAttempts:     3,
		RetentionTTL:    week,
		RetentionMax:    1000,
		CursorWriteMax:  time.Second,
		RestartMin:      time.Second,
		RestartMax:      time.Minute,
		ReceiverWindow:  24 * time.Hour,
		ReceiverEntries: 10000,
	}
	for i := range streams {
		w.Streams = append(w.Streams, sim.StreamSpec{
			Name: fmt.Sprintf("stream-%02d", i), Kind: engine.LogStream, Events: events / streams,
			SealEvery: time.Minute, LatencyMin: 10 * time.Millisecond, LatencyMax: 200 * time.Millisecond,
		})
	}
	for i := range bots {
		id := fmt.Sprintf("bot-%04d", i)
		w.Bots = append(w.Bots, sim.BotSpec{ID: id, Secret: []byte("secret-" + id), LatencyMin: 5 * time.Millisecond, LatencyMax: 300 * time.Millisecond})
		w.Members = append(w.Members, sim.MemberSpec{Stream: w.Streams[i%streams].Name, Bot: id})
	}
	plan := faults.None().With(faults.LateKey, faults.Params{Rate: 0.02, Max: week + 12*time.Hour})
	return w, plan
}
