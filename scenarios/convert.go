package scenarios

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/sim"
)

// FromResult rewrites a finished run as a scenario with an explicit
// workload (the exact events it produced, at the exact times) and an
// explicit fault schedule (every fault it injected, where it injected it),
// so that running the scenario replays the run without rolling any dice.
// base is the scenario the run came from (nil for a seed run); bugs are the
// known-bug variants it ran with.
func FromResult(r *sim.Result, base *Scenario, bugs []string) (*Scenario, error) {
	w := r.Workload
	s := &Scenario{Seed: r.Seed}
	if base != nil {
		s.Name, s.Title, s.Source = base.Name, base.Title, base.Source
		s.Engine = base.Engine
		s.Engine.Bugs = nil
		s.Receiver = base.Receiver
	} else {
		s.Name = fmt.Sprintf("seed-%d", r.Seed)
		s.Title = fmt.Sprintf("Seed %d of the random sweep, replayed with explicit events and faults", r.Seed)
		s.Engine = Engine{
			MaxAttempts: w.MaxAttempts, RetentionTTL: Duration(w.RetentionTTL), RetentionMax: w.RetentionMax,
			Lease: Duration(w.Lease), WebhookTimeout: Duration(w.WebhookTimeout), CleanupInterval: Duration(w.CleanupInterval),
		}
		if w.CursorMode == engine.CursorAsync {
			s.Engine.CursorMode = "async"
		}
		if w.HandOff == engine.HandOffDirect {
			s.Engine.HandOff = "direct"
		}
		s.Receiver = Receiver{Window: Duration(w.ReceiverWindow), MaxEntries: w.ReceiverEntries}
	}
	s.Engine.Bugs = slices.Clone(bugs)
	t := &s.Topology
	t.Nodes = w.Nodes
	for _, st := range w.Streams {
		out := Stream{Name: st.Name, Latency: &Span{Duration(st.LatencyMin), Duration(st.LatencyMax)}}
		if st.Kind == engine.TimestampStream {
			out.Kind = "timestamp"
			out.StampSeconds = st.StampSeconds
			for _, p := range st.ProducerSkews {
				out.Producers = append(out.Producers, Duration(p))
			}
		} else {
			out.Kind = "log"
			out.SealEvery = Duration(st.SealEvery)
			out.FirstMiniblock = st.FirstMiniblock
		}
		t.Streams = append(t.Streams, out)
	}
	for _, b := range w.Bots {
		// Secrets only sign requests; they never change what happens, so a
		// rewritten run does without the random bytes.
		t.Bots = append(t.Bots, Bot{ID: b.ID, Latency: &Span{Duration(b.LatencyMin), Duration(b.LatencyMax)}})
	}
	for _, m := range w.Members {
		t.Members = append(t.Members, Member{Stream: m.Stream, Bot: m.Bot})
	}
	for _, src := range w.Sources {
		t.Sources = append(t.Sources, Source{Name: src.Name, Apps: slices.Clone(src.Apps), ScanEvery: Duration(src.ScanEvery)})
		for _, u := range src.Updates {
			items := map[string]string{}
			for _, it := range u.Items {
				items[it.ID] = it.Version
			}
			s.Workload.Snapshots = append(s.Workload.Snapshots, Snapshot{Source: src.Name, At: Duration(u.At), Items: items})
		}
	}
	s.Workload.Produce = Duration(w.Produce)
	s.Workload.FaultWindow = Duration(w.FaultWindow)
	s.Workload.Liveness = Duration(w.Liveness)
	s.Workload.HOLBound = Duration(w.HOLBound)
	s.Workload.BatchMax = w.BatchMax
	s.Workload.RequeueDead = w.RequeueDead
	s.Workload.RequeueEvery = Duration(w.RequeueEvery)
	s.Workload.CursorWriteMax = Duration(w.CursorWriteMax)
	s.Workload.RestartMin = Duration(w.RestartMin)
	s.Workload.RestartMax = Duration(w.RestartMax)

	heal := w.FaultWindow
	for i, rec := range r.Trace {
		at := Duration(rec.Time.Sub(sim.Epoch))
		switch {
		case rec.Kind == "produce" && strings.HasPrefix(rec.Actor, "upstream/"):
			e := Event{Stream: strings.TrimPrefix(rec.Actor, "upstream/"), At: at, ID: field(rec, "event")}
			if p := field(rec, "producer"); p != "" {
				e.Producer, _ = strconv.Atoi(p)
			}
			if p, ok := r.Payloads[e.ID]; ok {
				b64 := base64.StdEncoding.EncodeToString(p)
				e.PayloadBase64 = &b64
			}
			s.Workload.Events = append(s.Workload.Events, e)
		case rec.Kind == "fault":
			if base != nil && field(rec, "scheduled") == "true" {
				continue // comes from base's own schedule, copied below
			}
			f, ok, err := faultFromRecord(r.Trace, i, heal)
			if err != nil {
				return nil, fmt.Errorf("rewriting trace line %d (%s): %w", i+1, rec, err)
			}
			if ok {
				s.Faults.Schedule = append(s.Faults.Schedule, f)
			}
		}
	}
	if base != nil {
		s.Faults.Schedule = append(s.Faults.Schedule, base.Faults.Schedule...)
	}
	return s, nil
}

func field(r sim.Record, k string) string {
	for _, f := range r.Fields {
		if f.K == k {
			return f.V
		}
	}
	return ""
}

func durField(r sim.Record, k string) (Duration, error) {
	v := field(r, k)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	return Duration(d), err
}

// faultFromRecord turns the fault record at trace[i] into a scheduled fault
// that fires at the same place.
func faultFromRecord(trace []sim.Record, i int, heal time.Duration) (Fault, bool, error) {
	rec := trace[i]
	at := Duration(rec.Time.Sub(sim.Epoch))
	k, err := faults.ParseKind(field(rec, "kind"))
	if err != nil {
		return Fault{}, false, err
	}
	f := Fault{Kind: string(k), At: at}
	f.Call, _ = strconv.Atoi(field(rec, "call"))
	bot := strings.TrimPrefix(rec.Actor, "bot/")
	attempt := func() { f.Attempt, _ = strconv.Atoi(field(rec, "attempt")) }
	switch k {
	case faults.Crash, faults.CrashAfterStoreWrite, faults.CrashAfterSend, faults.CrashAfterProcess:
		f.Node = rec.Actor
		if k == faults.Crash {
			f.After = field(rec, "after")
		}
		for _, next := range trace[i+1:] {
			if next.Actor == rec.Actor && next.Kind == "crash" {
				if f.RestartAfter, err = durField(next, "restart_in"); err != nil {
					return Fault{}, false, err
				}
				break
			}
		}
	case faults.WebhookDuplicate:
		f.Bot, f.Event = bot, field(rec, "event")
		attempt()
		f.Delay, err = durField(rec, "extra")
	case faults.WebhookRefused:
		f.Bot = bot
		d, e := durField(rec, "outage")
		if e != nil {
			return Fault{}, false, e
		}
		// The outage ends at the heal at the latest.
		f.Until = Duration(min(at.D()+d.D(), max(heal, at.D()+1)))
	case faults.Webhook5xx, faults.WebhookTimeout, faults.WebhookSlow:
		f.Bot, f.Event = bot, field(rec, "event")
		attempt()
		if k == faults.Webhook5xx {
			f.Status, _ = strconv.Atoi(field(rec, "status"))
		}
		if k == faults.WebhookSlow {
			f.Delay, err = durField(rec, "late")
		}
	case faults.UpstreamDuplicate:
		f.Stream, f.Node = strings.TrimPrefix(rec.Actor, "upstream/"), field(rec, "node")
		f.Delay, err = durField(rec, "delay")
	case faults.UpstreamReorder:
		f.Stream, f.Node = strings.TrimPrefix(rec.Actor, "upstream/"), field(rec, "node")
		for _, p := range strings.Fields(field(rec, "order")) {
			v, e := strconv.Atoi(p)
			if e != nil {
				return Fault{}, false, e
			}
			f.Order = append(f.Order, v)
		}
	case faults.ClockOffset:
		f.At, f.Node = 0, rec.Actor
		f.Incarnation, _ = strconv.Atoi(field(rec, "incarnation"))
		f.Offset, err = durField(rec, "offset")
	case faults.ClockDrift:
		f.At, f.Node = 0, rec.Actor
		f.Incarnation, _ = strconv.Atoi(field(rec, "incarnation"))
		ppm, e := strconv.ParseInt(field(rec, "ppm"), 10, 64)
		if e != nil {
			return Fault{}, false, e
		}
		f.Drift = Duration(ppm * int64(time.Hour) / 1_000_000)
	case faults.StoreError, faults.StoreAmbiguous:
		f.Node, f.Method = rec.Actor, field(rec, "method")
	case faults.MembershipChurn:
		f.Stream, f.Bot = field(rec, "stream"), field(rec, "bot")
		m := field(rec, "member") == "true"
		f.Member = &m
	case faults.LateKey:
		f.At, f.Bot = 0, bot
		if v := field(rec, "publish_at"); v == "never" {
			f.Never = true
		} else {
			f.At, err = durField(rec, "publish_at")
		}
	}
	return f, err == nil, err
}
