package sim

import (
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// StreamSpec describes one upstream stream.
type StreamSpec struct {
	Name string
	Kind engine.StreamKind
	// Events is how many events the stream produces, spread uniformly at
	// random over [0, Workload.Produce].
	Events int
	// SealEvery: log streams seal their minipool into a miniblock this often.
	SealEvery time.Duration
	// ProducerSkews: timestamp streams have one producer per entry, each
	// stamping created_at with its clock offset by that much.
	ProducerSkews []time.Duration
	// Latency bounds the upstream's delivery delay of a batch.
	LatencyMin, LatencyMax time.Duration
}

// BotSpec describes one bot (subscriber).
type BotSpec struct {
	ID     string
	Secret []byte
	// LatencyMin/Max bound the bot's webhook response time when healthy.
	LatencyMin, LatencyMax time.Duration
}

// MemberSpec makes Bot a member of Stream from the beginning.
type MemberSpec struct {
	Stream, Bot string
}

// Workload is the simulated world without its faults: topology, traffic and
// the engine/receiver settings that shape it.
type Workload struct {
	Streams []StreamSpec
	Bots    []BotSpec
	Members []MemberSpec
	Nodes   int // engine nodes sharing one store (1 or 2)

	// Produce is how long upstream events are produced; FaultWindow is when
	// faults heal (>= Produce); Liveness is the bound after the heal within
	// which every obligation must resolve (the run stops then at the latest).
	Produce     time.Duration
	FaultWindow time.Duration
	Liveness    time.Duration
	// HOLBound is the head-of-line bound for healthy bots.
	HOLBound time.Duration

	BatchMax int // events per upstream batch

	// Engine settings that vary per run (everything else: DefaultConfig).
	CursorMode      engine.CursorMode
	MaxAttempts     int
	RetentionTTL    time.Duration
	RetentionMax    int
	CursorWriteMax  time.Duration // async cursor writes land within this
	RestartMin      time.Duration // a crashed node reboots after [min, max]
	RestartMax      time.Duration
	ReceiverWindow  time.Duration
	ReceiverEntries int

	// RequeueDead: shortly after the heal an operator requeues every dead
	// letter once (engine.RequeueDead), which must then resolve again.
	RequeueDead bool
}

// Obligations-free sanity limits for user-supplied workloads.
func (w Workload) Validate() error {
	if len(w.Streams) == 0 || len(w.Bots) == 0 {
		return fmt.Errorf("workload: needs at least one stream and one bot")
	}
	if w.Nodes < 1 || w.Nodes > 8 {
		return fmt.Errorf("workload: Nodes is %d; use 1 to 8", w.Nodes)
	}
	if w.Produce <= 0 || w.FaultWindow < w.Produce {
		return fmt.Errorf("workload: need 0 < Produce (%v) <= FaultWindow (%v)", w.Produce, w.FaultWindow)
	}
	if w.Liveness <= 0 || w.BatchMax < 1 {
		return fmt.Errorf("workload: Liveness and BatchMax must be positive")
	}
	names := map[string]bool{}
	for _, s := range w.Streams {
		if s.Name == "" || names["s:"+s.Name] {
			return fmt.Errorf("workload: stream names must be unique and non-empty (%q)", s.Name)
		}
		names["s:"+s.Name] = true
		if s.Kind == engine.LogStream && s.SealEvery <= 0 {
			return fmt.Errorf("workload: log stream %s needs SealEvery > 0", s.Name)
		}
		if s.Kind == engine.TimestampStream && len(s.ProducerSkews) == 0 {
			return fmt.Errorf("workload: timestamp stream %s needs at least one producer", s.Name)
		}
	}
	for _, b := range w.Bots {
		if b.ID == "" || names["b:"+b.ID] {
			return fmt.Errorf("workload: bot ids must be unique and non-empty (%q)", b.ID)
		}
		names["b:"+b.ID] = true
	}
	for _, m := range w.Members {
		if !names["s:"+m.Stream] || !names["b:"+m.Bot] {
			return fmt.Errorf("workload: membership %s/%s names an unknown stream or bot", m.Stream, m.Bot)
		}
	}
	return nil
}

// DrawWorkload draws a small world from seed: 1-4 streams (log or
// timestamp), 1-5 bots, 20-200 events over up to two simulated hours, one or
// two nodes, and engine/receiver settings that make retention and the
// receiver's window matter in some runs.
func DrawWorkload(seed uint64) Workload {
	r := actorRand(seed, "workload")
	w := Workload{
		Nodes:           1,
		Produce:         between(r, 20*time.Minute, 2*time.Hour),
		Liveness:        30 * time.Minute,
		HOLBound:        2 * time.Minute,
		BatchMax:        1 + r.IntN(16),
		MaxAttempts:     2 + r.IntN(4),
		RetentionTTL:    7 * 24 * time.Hour,
		RetentionMax:    1000,
		CursorWriteMax:  between(r, 10*time.Millisecond, 5*time.Second),
		RestartMin:      time.Second,
		RestartMax:      between(r, 2*time.Second, 3*time.Minute),
		ReceiverWindow:  24 * time.Hour,
		ReceiverEntries: 10000,
	}
	w.FaultWindow = w.Produce + between(r, 0, 30*time.Minute)
	if r.IntN(10) < 3 {
		w.Nodes = 2
	}
	if r.IntN(2) == 0 {
		w.CursorMode = engine.CursorAsync
	}
	// Short retention in some runs, so TTL and cap cleanups really delete.
	if r.IntN(3) == 0 {
		w.RetentionTTL = between(r, 10*time.Minute, 90*time.Minute)
	}
	if r.IntN(3) == 0 {
		w.RetentionMax = 5 + r.IntN(40)
	}
	// A short dedup window or a small cache in some runs, so duplicates
	// beyond the receiver's memory get reported.
	if r.IntN(4) == 0 {
		w.ReceiverWindow = between(r, 10*time.Minute, 2*time.Hour)
	}
	if r.IntN(4) == 0 {
		w.ReceiverEntries = 20 + r.IntN(100)
	}

	nStreams := 1 + r.IntN(4)
	nBots := 1 + r.IntN(5)
	total := 20 + r.IntN(181)
	for i := 0; i < nStreams; i++ {
		s := StreamSpec{
			Name:       fmt.Sprintf("stream-%d", i+1),
			LatencyMin: between(r, 5*time.Millisecond, 200*time.Millisecond),
		}
		s.LatencyMax = s.LatencyMin + between(r, 0, 2*time.Second)
		if r.IntN(3) == 0 {
			s.Kind = engine.TimestampStream
			for p := 0; p < 1+r.IntN(3); p++ {
				s.ProducerSkews = append(s.ProducerSkews, between(r, -2*time.Minute, 2*time.Minute))
			}
		} else {
			s.Kind = engine.LogStream
			s.SealEvery = between(r, 2*time.Second, 2*time.Minute)
		}
		s.Events = total / nStreams
		if i == 0 {
			s.Events += total % nStreams
		}
		w.Streams = append(w.Streams, s)
	}
	for i := 0; i < nBots; i++ {
		b := BotSpec{
			ID:         fmt.Sprintf("bot-%d", i+1),
			Secret:     make([]byte, 24),
			LatencyMin: between(r, 2*time.Millisecond, 100*time.Millisecond),
		}
		b.LatencyMax = b.LatencyMin + between(r, 0, 700*time.Millisecond)
		for j := range b.Secret {
			b.Secret[j] = byte(r.Uint32())
		}
		w.Bots = append(w.Bots, b)
	}
	for _, s := range w.Streams {
		for _, b := range w.Bots {
			if r.IntN(10) < 6 {
				w.Members = append(w.Members, MemberSpec{Stream: s.Name, Bot: b.ID})
			}
		}
	}
	if len(w.Members) == 0 {
		w.Members = append(w.Members, MemberSpec{Stream: w.Streams[0].Name, Bot: w.Bots[0].ID})
	}
	w.RequeueDead = r.IntN(3) == 0
	return w
}
