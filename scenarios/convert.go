package scenarios

import (
	"encoding/base64"
	"fmt"
	"slices"
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
		s.Engine = Engine{Config: w.EngineConfig()}
		s.Receiver = Receiver{Window: Duration(w.ReceiverWindow), MaxEntries: w.ReceiverEntries, Tolerance: Duration(w.ReceiverTolerance)}
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
		t.Bots = append(t.Bots, Bot{ID: b.ID, Latency: &Span{Duration(b.LatencyMin), Duration(b.LatencyMax)},
			Receiver: rxEntryNames[b.Entry], HandlerFailRate: b.HandlerFailRate, Whsec: b.WhsecSecret, ForgeRate: b.ForgeRate,
			RotateAt: Duration(b.RotateAt)})
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
	if cj := w.ClockJumps; len(cj.Jumps) > 0 {
		out := &ClockJumps{Bound: Duration(cj.Bound)}
		for _, j := range cj.Jumps {
			out.Jumps = append(out.Jumps, ClockJump{At: Duration(j.At), Node: j.Node, By: Duration(j.By), Step: j.Step})
		}
		s.Workload.ClockJumps = out
	}
	s.Workload.Produce = Duration(w.Produce)
	s.Workload.FaultWindow = Duration(w.FaultWindow)
	s.Workload.Liveness = Duration(w.Liveness)
	s.Workload.HOLBound = Duration(w.HOLBound)
	s.Workload.BatchMax = w.BatchMax
	s.Workload.RequeueDead = w.RequeueDead
	s.Workload.RequeueEvery = Duration(w.RequeueEvery)
	s.Workload.CursorWriteMax = Duration(w.CursorWriteMax)
	s.Workload.ResultBatch = Duration(w.ResultBatch)
	s.Workload.ResumeOverlap = w.ResumeOverlap
	s.Workload.RestartMin = Duration(w.RestartMin)
	s.Workload.RestartMax = Duration(w.RestartMax)

	// The events, like the faults, come from the run's typed record.
	for _, pe := range r.Produced {
		e := Event{Stream: pe.Stream, At: Duration(pe.At), ID: pe.ID, Producer: pe.Producer}
		if p, ok := r.Payloads[e.ID]; ok {
			b64 := base64.StdEncoding.EncodeToString(p)
			e.PayloadBase64 = &b64
		}
		s.Workload.Events = append(s.Workload.Events, e)
	}
	// The faults come from the run's own record of what it injected, not
	// from the trace: a fault is a typed value from injection to file.
	for _, f := range r.Fired {
		if base != nil && f.Scheduled {
			continue // comes from base's own schedule, copied below
		}
		s.Faults.Schedule = append(s.Faults.Schedule, fileFault(f.Fault))
	}
	if base != nil {
		s.Faults.Schedule = append(s.Faults.Schedule, base.Faults.Schedule...)
	}
	return s, nil
}

// fileFault is how a scenario file writes f; Fault.fault reads it back.
// The two are each other's inverse (TestFaultFileRoundTrip checks every
// field of faults.Fault).
func fileFault(f faults.Fault) Fault {
	out := Fault{
		Kind: string(f.Kind), At: Duration(f.At), Until: Duration(f.Until), Node: f.Node, Bot: f.Bot, Stream: f.Stream,
		Event: f.Event, Attempt: f.Attempt, After: f.After, Method: f.Method, RestartAfter: Duration(f.RestartAfter),
		Offset: Duration(f.Offset), Drift: Duration(f.PPM * int64(time.Hour) / 1_000_000), Incarnation: f.Incarnation,
		Delay: Duration(f.Delay), Status: f.Status, Order: slices.Clone(f.Order), Never: f.Never, Call: f.Call,
	}
	if f.Until == faults.Forever {
		out.Until = Never
	}
	if f.Kind == faults.MembershipChurn {
		m := f.Member
		out.Member = &m
		out.Back = f.Back
	}
	return out
}

var faultKindNames = func() []string {
	var ns []string
	for _, k := range faults.All() {
		ns = append(ns, string(k))
	}
	return ns
}()

// fault converts a file's fault to the simulator's, checking the fields
// that only make sense for some kinds.
func (f Fault) fault() (faults.Fault, error) {
	k, err := faults.ParseKind(f.Kind)
	if err != nil {
		return faults.Fault{}, fmt.Errorf("kind %q is not a fault kind (%s)", f.Kind, strings.Join(faultKindNames, ", "))
	}
	if f.Offset != 0 && k != faults.ClockOffset {
		return faults.Fault{}, fmt.Errorf("offset is only for clock-offset")
	}
	if f.Drift != 0 && k != faults.ClockDrift {
		return faults.Fault{}, fmt.Errorf("drift is only for clock-drift")
	}
	// Checked before the conversion to parts per million, which would
	// overflow for a drift past about 2.5h.
	if d := f.Drift.D(); d < -faults.MaxClockDrift || d > faults.MaxClockDrift {
		return faults.Fault{}, fmt.Errorf("drift %v is outside [-%v, %v] (the clock's gain or loss per hour)", d, faults.MaxClockDrift, faults.MaxClockDrift)
	}
	if d := f.Offset.D(); d < -faults.MaxClockOffset || d > faults.MaxClockOffset {
		return faults.Fault{}, fmt.Errorf("offset %v is outside [-%v, %v]", d, faults.MaxClockOffset, faults.MaxClockOffset)
	}
	if f.Member != nil && k != faults.MembershipChurn {
		return faults.Fault{}, fmt.Errorf("member is only for membership-churn")
	}
	if f.Back != 0 && k != faults.MembershipChurn {
		return faults.Fault{}, fmt.Errorf("back is only for membership-churn")
	}
	if f.Back != 0 && f.Member != nil && !*f.Member {
		return faults.Fault{}, fmt.Errorf("back is only for a join (a leave takes effect after the head)")
	}
	if f.Never && k != faults.LateKey {
		return faults.Fault{}, fmt.Errorf("never is only for late-key (a window that never closes is until: never)")
	}
	if len(f.Order) > 0 && k != faults.UpstreamReorder {
		return faults.Fault{}, fmt.Errorf("order is only for upstream-reorder")
	}
	out := faults.Fault{
		Kind: k, At: f.At.D(), Node: f.Node, Bot: f.Bot, Stream: f.Stream, Event: f.Event,
		Attempt: f.Attempt, After: f.After, Method: f.Method, RestartAfter: f.RestartAfter.D(),
		Offset: f.Offset.D(), Incarnation: f.Incarnation, Delay: f.Delay.D(), Status: f.Status,
		Order: slices.Clone(f.Order), Never: f.Never, Call: f.Call,
		// A churn fault without member: joins.
		Member: k == faults.MembershipChurn && (f.Member == nil || *f.Member),
		Back:   f.Back,
		PPM:    int64(f.Drift.D()) * 1_000_000 / int64(time.Hour),
	}
	if f.Until == Never {
		out.Until = faults.Forever
	} else {
		out.Until = f.Until.D()
	}
	return out, nil
}
