package scenarios

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/sim"
)

// Limits on what one scenario may ask for.
const (
	MaxEvents = 100000
	MaxSpan   = 30 * 24 * time.Hour
)

// Defaults for fields a scenario leaves out.
const (
	DefaultSealEvery      = 10 * time.Second
	DefaultScanEvery      = time.Minute
	DefaultLiveness       = 30 * time.Minute
	DefaultHOLBound       = 2 * time.Minute
	DefaultBatchMax       = 16
	DefaultCursorWriteMax = 100 * time.Millisecond
	DefaultRestartMin     = time.Second
	DefaultRestartMax     = 5 * time.Second
	DefaultReceiverWindow = 24 * time.Hour
	DefaultReceiverMax    = 10000
)

var (
	defaultStreamLatency = Span{Duration(10 * time.Millisecond), Duration(50 * time.Millisecond)}
	defaultBotLatency    = Span{Duration(5 * time.Millisecond), Duration(20 * time.Millisecond)}
	nameRE               = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
)

func lineErr(line int, field, format string, args ...any) error {
	return &Error{Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// validate checks everything that is not syntax: names that refer to
// something, values in range, and that the scenario builds.
func (s *Scenario) validate() error {
	if !nameRE.MatchString(s.Name) {
		return lineErr(1, "name", "%q is not a name (lower-case letters, digits, '.', '_', '-')", s.Name)
	}
	if strings.TrimSpace(s.Title) == "" || strings.Contains(s.Title, "\n") {
		return lineErr(1, "title", "must be one non-empty line")
	}
	t := &s.Topology
	if len(t.Streams) == 0 {
		return lineErr(1, "topology.streams", "needs at least one stream")
	}
	if len(t.Bots) == 0 {
		return lineErr(1, "topology.bots", "needs at least one bot")
	}
	streams := map[string]*Stream{}
	for i := range t.Streams {
		st := &t.Streams[i]
		f := fmt.Sprintf("topology.streams[%d]", i)
		if st.Name == "" || streams[st.Name] != nil {
			return lineErr(st.Line, f+".name", "stream names must be unique and non-empty (%q)", st.Name)
		}
		streams[st.Name] = st
		switch st.Kind {
		case "", "log":
			if len(st.Producers) > 0 {
				return lineErr(st.Line, f+".producers", "only timestamp streams have producers")
			}
		case "timestamp":
			if st.SealEvery != 0 {
				return lineErr(st.Line, f+".seal_every", "timestamp streams are not sealed into miniblocks")
			}
		default:
			return lineErr(st.Line, f+".kind", "%q is not a stream kind; use log or timestamp", st.Kind)
		}
	}
	bots := map[string]bool{}
	for i, b := range t.Bots {
		if b.ID == "" || bots[b.ID] {
			return lineErr(b.Line, fmt.Sprintf("topology.bots[%d].id", i), "bot ids must be unique and non-empty (%q)", b.ID)
		}
		bots[b.ID] = true
	}
	members := map[[2]string]bool{}
	for i, m := range t.Members {
		f := fmt.Sprintf("topology.members[%d]", i)
		switch {
		case streams[m.Stream] == nil:
			return lineErr(m.Line, f+".stream", "no stream is called %q", m.Stream)
		case !bots[m.Bot]:
			return lineErr(m.Line, f+".bot", "no bot is called %q", m.Bot)
		case members[[2]string{m.Stream, m.Bot}]:
			return lineErr(m.Line, f, "%s is already a member of %s", m.Bot, m.Stream)
		}
		members[[2]string{m.Stream, m.Bot}] = true
	}
	sources := map[string]bool{}
	for i, src := range t.Sources {
		f := fmt.Sprintf("topology.sources[%d]", i)
		if src.Name == "" || sources[src.Name] {
			return lineErr(src.Line, f+".name", "source names must be unique and non-empty (%q)", src.Name)
		}
		sources[src.Name] = true
		if len(src.Apps) == 0 {
			return lineErr(src.Line, f+".apps", "a source needs at least one app")
		}
		for j, app := range src.Apps {
			if !bots[app] {
				return lineErr(src.Line, fmt.Sprintf("%s.apps[%d]", f, j), "no bot is called %q (apps are bots)", app)
			}
		}
	}
	// Guards that keep a run finite and small enough to simulate in
	// seconds (a typo like 100000d would otherwise seal miniblocks forever).
	total := 0
	for i, e := range s.Workload.Events {
		total += max(1, e.Count)
		if total > MaxEvents {
			return lineErr(e.Line, fmt.Sprintf("workload.events[%d].count", i), "the workload has more than %d events; split it into smaller scenarios", MaxEvents)
		}
		if last := e.At.D() + time.Duration(max(0, e.Count-1))*e.Every.D(); last > MaxSpan || e.Every.D() > MaxSpan {
			return lineErr(e.Line, fmt.Sprintf("workload.events[%d].at", i), "events must happen within %s of the start", Duration(MaxSpan))
		}
	}
	for _, d := range []struct {
		field string
		v     Duration
	}{{"workload.produce", s.Workload.Produce}, {"workload.fault_window", s.Workload.FaultWindow}, {"workload.liveness", s.Workload.Liveness}} {
		if d.v.D() > MaxSpan {
			return lineErr(0, d.field, "%s is longer than %s", d.v, Duration(MaxSpan))
		}
	}
	for i, st := range t.Streams {
		if st.SealEvery != 0 && st.SealEvery.D() < 100*time.Millisecond {
			return lineErr(st.Line, fmt.Sprintf("topology.streams[%d].seal_every", i), "%s is shorter than 100ms", st.SealEvery)
		}
	}
	for i, src := range t.Sources {
		if src.ScanEvery != 0 && src.ScanEvery.D() < time.Second {
			return lineErr(src.Line, fmt.Sprintf("topology.sources[%d].scan_every", i), "%s is shorter than 1s", src.ScanEvery)
		}
	}
	if ci := s.Engine.full().CleanupInterval; ci < time.Second {
		return lineErr(s.Engine.lines["cleanup_interval"], "engine.cleanup_interval", "%s is shorter than 1s", Duration(ci))
	}
	for i, sn := range s.Workload.Snapshots {
		if sn.At.D() > MaxSpan {
			return lineErr(sn.Line, fmt.Sprintf("workload.snapshots[%d].at", i), "snapshots must happen within %s of the start", Duration(MaxSpan))
		}
	}
	for i, f := range s.Faults.Schedule {
		if f.At.D() > MaxSpan || (f.Until != Never && f.Until.D() > MaxSpan) {
			return lineErr(f.Line, fmt.Sprintf("faults.schedule[%d]", i), "faults must happen within %s of the start (use until: never for a window that never closes)", Duration(MaxSpan))
		}
	}
	ids := map[string]bool{}
	for i, e := range s.Workload.Events {
		f := fmt.Sprintf("workload.events[%d]", i)
		st := streams[e.Stream]
		if st == nil {
			return lineErr(e.Line, f+".stream", "no stream is called %q", e.Stream)
		}
		nprod := max(1, len(st.Producers))
		if e.Producer != 0 && (st.Kind != "timestamp" || e.Producer >= nprod) {
			return lineErr(e.Line, f+".producer", "stream %s has producers 0..%d", e.Stream, nprod-1)
		}
		if e.Count > 1 && e.Every <= 0 {
			return lineErr(e.Line, f+".every", "a count of %d needs a positive every (the spacing)", e.Count)
		}
		if e.ID != "" {
			for _, id := range expandIDs(e) {
				if ids[e.Stream+"\x00"+id] {
					return lineErr(e.Line, f+".id", "event id %q is used twice in stream %s", id, e.Stream)
				}
				ids[e.Stream+"\x00"+id] = true
			}
		}
	}
	for i, sn := range s.Workload.Snapshots {
		f := fmt.Sprintf("workload.snapshots[%d]", i)
		if !sources[sn.Source] {
			return lineErr(sn.Line, f+".source", "no source is called %q", sn.Source)
		}
		for _, id := range sortedKeys(sn.Items) {
			if id == "" || sn.Items[id] == "" {
				return lineErr(sn.Line, f+".items", "item names and versions must not be empty (%q: %q)", id, sn.Items[id])
			}
		}
	}
	e := s.Engine
	if _, _, err := ParseBugs(e.Bugs); err != nil {
		return lineErr(e.BugsLine, "engine.bugs", "%v", err)
	}
	if _, err := s.plan(); err != nil {
		return lineErr(s.Faults.RandomLine, "faults.random", "%v (use \"draw\" for a plan drawn from the seed, or kind=rate[/max],...)", err)
	}
	inv := oracle.Invariants()
	for i, v := range s.Expect.Violations {
		if !slices.Contains(inv, v) {
			return lineErr(s.Expect.Line, fmt.Sprintf("expect.violations[%d]", i), "%q is not an invariant (%s)", v, strings.Join(inv, ", "))
		}
	}
	for i, c := range s.Catches {
		f := fmt.Sprintf("catches[%d]", i)
		if _, ok := VariantNamed(c.Bug); !ok {
			return lineErr(c.Line, f+".bug", "%q is not a known bug (%s)", c.Bug, strings.Join(VariantNames(), ", "))
		}
		if !slices.Contains(inv, c.Invariant) {
			return lineErr(c.Line, f+".invariant", "%q is not an invariant (%s)", c.Invariant, strings.Join(inv, ", "))
		}
	}
	w := s.workload()
	for i, fs := range s.Faults.Schedule {
		path := fmt.Sprintf("faults.schedule[%d]", i)
		sf, err := fs.fault()
		if err != nil {
			return lineErr(fs.Line, path, "%v", err)
		}
		if err := sim.ValidateSchedule(w, []faults.Fault{sf}); err != nil {
			msg := err.Error()
			if _, rest, ok := strings.Cut(msg, "): "); ok {
				msg = rest
			}
			return lineErr(fs.Line, path, "%s", msg)
		}
	}
	if err := w.Validate(); err != nil {
		return lineErr(0, "workload", "%v", err)
	}
	cfg := s.engineConfig(w)
	cfg.Clock, cfg.Rand = fixedClock{}, rand.New(rand.NewPCG(1, 1))
	if err := cfg.Validate(); err != nil {
		return s.Engine.configError(err)
	}
	return nil
}

type fixedClock struct{}

func (fixedClock) Now() time.Time { return sim.Epoch }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// payload is the event's body, nil when it gives none (an empty one is
// not nil). The loader has checked the base64.
func (e Event) payload() []byte {
	switch {
	case e.Payload != nil:
		return append([]byte{}, *e.Payload...)
	case e.PayloadBase64 != nil:
		b, _ := base64.StdEncoding.DecodeString(*e.PayloadBase64)
		return append([]byte{}, b...)
	}
	return nil
}

func expandIDs(e Event) []string {
	n := max(1, e.Count)
	if e.ID == "" {
		return make([]string, n)
	}
	if n == 1 {
		return []string{e.ID}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", e.ID, i+1)
	}
	return out
}

func (s *Scenario) plan() (faults.Plan, error) {
	switch strings.TrimSpace(s.Faults.Random) {
	case "", "none":
		return faults.None(), nil
	case "draw":
		return faults.Draw(s.Seed), nil
	}
	return faults.ParsePlan(s.Faults.Random)
}

// events expands the workload's events, per stream in time order.
func (s *Scenario) events() map[string][]sim.EventSpec {
	out := map[string][]sim.EventSpec{}
	for _, e := range s.Workload.Events {
		payload := e.payload()
		for i, id := range expandIDs(e) {
			out[e.Stream] = append(out[e.Stream], sim.EventSpec{
				At: e.At.D() + time.Duration(i)*e.Every.D(), ID: id, Producer: e.Producer, Payload: payload,
			})
		}
	}
	for _, evs := range out {
		slices.SortStableFunc(evs, func(a, b sim.EventSpec) int { return cmp.Compare(a.At, b.At) })
	}
	return out
}

// workload builds the simulator's world, with defaults filled in.
func (s *Scenario) workload() sim.Workload {
	t := s.Topology
	wl := s.Workload
	// The workload carries the engine settings it draws for seeds; a
	// scenario's come from its engine section.
	ecfg := s.Engine.full()
	w := sim.Workload{
		Nodes:             max(1, t.Nodes),
		Liveness:          or(wl.Liveness.D(), DefaultLiveness),
		HOLBound:          or(wl.HOLBound.D(), DefaultHOLBound),
		BatchMax:          or(wl.BatchMax, DefaultBatchMax),
		MaxAttempts:       ecfg.MaxAttempts,
		RetentionTTL:      ecfg.RetentionTTL,
		RetentionMax:      ecfg.RetentionMax,
		CursorWriteMax:    or(wl.CursorWriteMax.D(), DefaultCursorWriteMax),
		ResultBatch:       wl.ResultBatch.D(),
		ResumeOverlap:     wl.ResumeOverlap,
		RestartMin:        or(wl.RestartMin.D(), DefaultRestartMin),
		RestartMax:        or(wl.RestartMax.D(), DefaultRestartMax),
		ReceiverWindow:    or(s.Receiver.Window.D(), DefaultReceiverWindow),
		ReceiverEntries:   or(s.Receiver.MaxEntries, DefaultReceiverMax),
		ReceiverTolerance: s.Receiver.Tolerance.D(),
		RequeueDead:       wl.RequeueDead,
		RequeueEvery:      wl.RequeueEvery.D(),
		Lease:             ecfg.Lease,
		WebhookTimeout:    ecfg.WebhookTimeout,
		CleanupInterval:   ecfg.CleanupInterval,
		CursorMode:        ecfg.CursorMode,
		HandOff:           ecfg.HandOff,
	}
	if w.RestartMax < w.RestartMin {
		w.RestartMax = w.RestartMin
	}
	if cj := wl.ClockJumps; cj != nil {
		w.ClockJumps.Bound = cj.Bound.D()
		for _, j := range cj.Jumps {
			w.ClockJumps.Jumps = append(w.ClockJumps.Jumps, sim.ClockJump{At: j.At.D(), Node: j.Node, By: j.By.D(), Step: j.Step})
		}
	}
	evs := s.events()
	last := time.Duration(0)
	for _, st := range t.Streams {
		spec := sim.StreamSpec{Name: st.Name, ExplicitEvents: true, Explicit: evs[st.Name]}
		lat := defaultStreamLatency
		if st.Latency != nil {
			lat = *st.Latency
		}
		spec.LatencyMin, spec.LatencyMax = lat.Min.D(), lat.Max.D()
		if st.Kind == "timestamp" {
			spec.Kind = engine.TimestampStream
			spec.StampSeconds = st.StampSeconds
			spec.ProducerSkews = []time.Duration{0}
			if len(st.Producers) > 0 {
				spec.ProducerSkews = spec.ProducerSkews[:0]
				for _, p := range st.Producers {
					spec.ProducerSkews = append(spec.ProducerSkews, p.D())
				}
			}
		} else {
			spec.Kind = engine.LogStream
			spec.SealEvery = or(st.SealEvery.D(), DefaultSealEvery)
			spec.FirstMiniblock = st.FirstMiniblock
		}
		for _, e := range spec.Explicit {
			last = max(last, e.At)
		}
		w.Streams = append(w.Streams, spec)
	}
	for _, b := range t.Bots {
		lat := defaultBotLatency
		if b.Latency != nil {
			lat = *b.Latency
		}
		secret := b.Secret
		if secret == "" {
			secret = "secret-" + b.ID
		}
		w.Bots = append(w.Bots, sim.BotSpec{ID: b.ID, Secret: []byte(secret), LatencyMin: lat.Min.D(), LatencyMax: lat.Max.D(),
			Entry: rxEntries[b.Receiver], HandlerFailRate: b.HandlerFailRate, WhsecSecret: b.Whsec, ForgeRate: b.ForgeRate,
			RotateAt: b.RotateAt.D()})
	}
	for _, m := range t.Members {
		w.Members = append(w.Members, sim.MemberSpec{Stream: m.Stream, Bot: m.Bot})
	}
	for _, src := range t.Sources {
		spec := sim.SourceSpec{Name: src.Name, Apps: slices.Clone(src.Apps), ScanEvery: or(src.ScanEvery.D(), DefaultScanEvery)}
		for _, sn := range s.Workload.Snapshots {
			if sn.Source != src.Name {
				continue
			}
			u := sim.SourceUpdate{At: sn.At.D()}
			for _, id := range sortedKeys(sn.Items) {
				u.Items = append(u.Items, impl.DeliveredItem{ID: id, Version: sn.Items[id]})
			}
			spec.Updates = append(spec.Updates, u)
			last = max(last, sn.At.D())
		}
		slices.SortStableFunc(spec.Updates, func(a, b sim.SourceUpdate) int { return cmp.Compare(a.At, b.At) })
		w.Sources = append(w.Sources, spec)
	}
	w.Produce = wl.Produce.D()
	if w.Produce == 0 {
		w.Produce = max(last+time.Second, time.Second)
	}
	w.FaultWindow = wl.FaultWindow.D()
	if w.FaultWindow == 0 {
		heal := w.Produce
		for _, f := range s.Faults.Schedule {
			heal = max(heal, f.At.D()+time.Second)
			if f.Until != Never {
				heal = max(heal, f.Until.D())
			}
		}
		w.FaultWindow = heal
	}
	if w.FaultWindow < w.Produce {
		w.FaultWindow = w.Produce
	}
	return w
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// engineConfig is what every node of the scenario runs with (before the
// simulator injects Node, Clock, Rand and CrashHook).
func (s *Scenario) engineConfig(w sim.Workload) engine.Config {
	c := w.EngineConfig()
	s.tweak(&c)
	return c
}

// tweak sets every engine setting the file may give (the workload's
// included) to the file's.
func (s *Scenario) tweak(c *engine.Config) { s.Engine.apply(c) }

// Build turns the scenario into a simulation, with extra known bugs
// switched on besides the ones the file names.
func (s *Scenario) Build(extra ...string) (sim.Config, error) {
	bugs, _, err := ParseBugs(append(slices.Clone(s.Engine.Bugs), extra...))
	if err != nil {
		return sim.Config{}, err
	}
	plan, err := s.plan()
	if err != nil {
		return sim.Config{}, err
	}
	w := s.workload()
	var sched []faults.Fault
	for _, f := range s.Faults.Schedule {
		sf, err := f.fault()
		if err != nil {
			return sim.Config{}, err
		}
		sched = append(sched, sf)
	}
	return sim.Config{
		Seed: s.Seed, Workload: &w, Plan: &plan, Schedule: sched, Bugs: bugs,
		Engine: s.tweak,
	}, nil
}

// Run builds and simulates the scenario on the in-memory store.
func (s *Scenario) Run(extra ...string) (*sim.Result, error) {
	cfg, err := s.Build(extra...)
	if err != nil {
		return nil, err
	}
	return sim.Run(cfg)
}

// Invariants returns the distinct invariants r violated, in report order.
func Invariants(r *sim.Result) []string {
	seen := map[string]bool{}
	for _, v := range r.Violations {
		seen[v.Invariant] = true
	}
	var out []string
	for _, inv := range oracle.Invariants() {
		if seen[inv] {
			out = append(out, inv)
		}
	}
	return out
}

// Matches reports whether r's outcome is the one the scenario expects, and
// says why not.
func (s *Scenario) Matches(r *sim.Result) (bool, string) {
	got := Invariants(r)
	want := slices.Clone(s.Expect.Violations)
	order := oracle.Invariants()
	sort.Slice(want, func(i, j int) bool { return slices.Index(order, want[i]) < slices.Index(order, want[j]) })
	want = slices.Compact(want)
	if slices.Equal(got, want) {
		if s.RequireFired && len(want) == 0 && len(r.Unfired) > 0 {
			// A clean run that never reached the scheduled situation
			// passes nothing: the engine took another path than the one
			// the file builds.
			f := r.Unfired[0]
			return false, fmt.Sprintf("expected no violation and got none, but %d scheduled fault(s) never fired (first: %s at %s): the run did not reach the situation the scenario builds", len(r.Unfired), f.Kind, f.At)
		}
		return true, ""
	}
	if len(want) == 0 {
		return false, fmt.Sprintf("expected no violation, got %s (first: %s)", strings.Join(got, ", "), r.Violations[0])
	}
	if len(got) == 0 {
		return false, fmt.Sprintf("expected %s, got no violation", strings.Join(want, ", "))
	}
	return false, fmt.Sprintf("expected %s, got %s", strings.Join(want, ", "), strings.Join(got, ", "))
}
