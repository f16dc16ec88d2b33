package scenarios

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/sim"
)

// Size is what minimization shrinks.
type Size struct {
	Faults    int `json:"faults"`
	Events    int `json:"events"`
	Bots      int `json:"bots"`
	Streams   int `json:"streams"`
	Snapshots int `json:"snapshots"`
	Nodes     int `json:"nodes"`
}

func (z Size) String() string {
	return fmt.Sprintf("%d faults, %d events, %d bots, %d streams, %d snapshot updates, %d nodes",
		z.Faults, z.Events, z.Bots, z.Streams, z.Snapshots, z.Nodes)
}

// SizeOf measures a scenario (events counted after expanding count).
func SizeOf(s *Scenario) Size {
	z := Size{Faults: len(s.Faults.Schedule), Bots: len(s.Topology.Bots), Streams: len(s.Topology.Streams),
		Snapshots: len(s.Workload.Snapshots), Nodes: max(1, s.Topology.Nodes)}
	for _, e := range s.Workload.Events {
		z.Events += max(1, e.Count)
	}
	return z
}

// MinimizeOptions bound the search.
type MinimizeOptions struct {
	// Invariant is the failure to keep; empty means the first violation of
	// the scenario's own run.
	Invariant string
	MaxRuns   int           // default 800
	MaxTime   time.Duration // default 60s
}

// Minimized is the outcome of Minimize.
type Minimized struct {
	Scenario  *Scenario
	Invariant string
	First     oracle.Violation // the first violation of that invariant in the minimized run
	Before    Size
	After     Size
	Runs      int
	Elapsed   time.Duration
}

// ErrDoesNotFail is returned when the scenario to minimize has no
// violation of the invariant asked for.
var ErrDoesNotFail = errors.New("the scenario does not fail that way, so there is nothing to minimize")

// Minimize reduces a failing scenario (with an explicit schedule, such as
// FromResult makes) to a smaller one that still violates the same
// invariant: delta debugging over its faults, events and snapshot updates,
// then removing bots, streams, memberships, sources and nodes one at a time,
// until nothing more can go. The input is not modified.
func Minimize(s *Scenario, opts MinimizeOptions) (*Minimized, error) {
	start := time.Now()
	if opts.MaxRuns <= 0 {
		opts.MaxRuns = 800
	}
	if opts.MaxTime <= 0 {
		opts.MaxTime = 60 * time.Second
	}
	m := &minimizer{opts: opts, start: start}
	cur := clone(s)
	explicitIDs(cur)
	r, err := cur.Run()
	if err != nil {
		return nil, err
	}
	m.runs++
	target := opts.Invariant
	if target == "" {
		if len(r.Violations) == 0 {
			return nil, ErrDoesNotFail
		}
		target = r.Violations[0].Invariant
	}
	if firstOf(r, target) == nil {
		return nil, ErrDoesNotFail
	}
	m.target = target
	before := SizeOf(s)

	for progress := true; progress && !m.exhausted(); {
		progress = false
		try := func(step func(*Scenario) *Scenario) {
			if next := step(cur); next != nil {
				cur, progress = next, true
			}
		}
		try(m.faults)
		try(m.events)
		try(m.snapshots)
		try(m.bots)
		try(m.streams)
		try(m.members)
		try(m.sources)
		try(m.nodes)
	}
	// Let the time frame follow what is left, if the failure survives it.
	if !m.exhausted() && (cur.Workload.Produce != 0 || cur.Workload.FaultWindow != 0) {
		c := clone(cur)
		c.Workload.Produce, c.Workload.FaultWindow = 0, 0
		if m.fails(c) {
			cur = c
		}
	}
	final, err := cur.Run()
	if err != nil {
		return nil, err
	}
	first := firstOf(final, target)
	if first == nil {
		return nil, fmt.Errorf("minimize: the reduced scenario no longer fails with %s (the simulator is not deterministic?)", target)
	}
	cur.Expect = Expect{Violations: Invariants(final)}
	return &Minimized{Scenario: cur, Invariant: target, First: *first, Before: before, After: SizeOf(cur),
		Runs: m.runs, Elapsed: time.Since(start)}, nil
}

type minimizer struct {
	opts   MinimizeOptions
	target string
	runs   int
	start  time.Time
}

func (m *minimizer) exhausted() bool {
	return m.runs >= m.opts.MaxRuns || time.Since(m.start) >= m.opts.MaxTime
}

// fails runs a candidate: does it still violate the target invariant?
func (m *minimizer) fails(c *Scenario) bool {
	if m.exhausted() {
		return false
	}
	if c.validate() != nil {
		return false
	}
	m.runs++
	r, err := c.Run()
	return err == nil && firstOf(r, m.target) != nil
}

func firstOf(r *sim.Result, inv string) *oracle.Violation {
	for i := range r.Violations {
		if r.Violations[i].Invariant == inv {
			return &r.Violations[i]
		}
	}
	return nil
}

// ddmin is delta debugging (complements only): it removes ever smaller
// chunks of items while the candidate built from the rest still fails.
func ddmin[T any](m *minimizer, items []T, build func([]T) *Scenario) ([]T, bool) {
	changed := false
	if len(items) > 0 && m.fails(build(nil)) {
		return nil, true
	}
	n := 2
	for len(items) >= 2 && !m.exhausted() {
		chunk := (len(items) + n - 1) / n
		reduced := false
		for i := 0; i < len(items); i += chunk {
			cand := slices.Concat(items[:i], items[min(i+chunk, len(items)):])
			if m.fails(build(cand)) {
				items, reduced, changed = cand, true, true
				n = max(n-1, 2)
				break
			}
		}
		if !reduced {
			if n >= len(items) {
				break
			}
			n = min(2*n, len(items))
		}
	}
	return items, changed
}

// list runs ddmin over one list of the scenario, picked by field, and
// returns the reduced scenario, or nil if nothing could go.
func list[T any](m *minimizer, s *Scenario, field func(*Scenario) *[]T) *Scenario {
	out, ok := ddmin(m, *field(s), func(items []T) *Scenario {
		c := clone(s)
		*field(c) = slices.Clone(items)
		return c
	})
	if !ok {
		return nil
	}
	c := clone(s)
	*field(c) = out
	return c
}

func (m *minimizer) faults(s *Scenario) *Scenario {
	return list(m, s, func(c *Scenario) *[]Fault { return &c.Faults.Schedule })
}

func (m *minimizer) events(s *Scenario) *Scenario {
	return list(m, s, func(c *Scenario) *[]Event { return &c.Workload.Events })
}

func (m *minimizer) snapshots(s *Scenario) *Scenario {
	return list(m, s, func(c *Scenario) *[]Snapshot { return &c.Workload.Snapshots })
}

func (m *minimizer) members(s *Scenario) *Scenario {
	return list(m, s, func(c *Scenario) *[]Member { return &c.Topology.Members })
}

// dropEach tries to remove each item of items(s) in turn, keeping at least
// keep of them: without removes one (and everything that names it) from a
// clone. Each removal that still fails is kept. It returns the smallest
// failing scenario found, or nil.
func dropEach[T any](m *minimizer, s *Scenario, items func(*Scenario) []T, keep int, without func(*Scenario, T)) *Scenario {
	var best *Scenario
	cur := s
	for _, x := range slices.Clone(items(s)) {
		if len(items(cur)) <= keep || m.exhausted() {
			break
		}
		c := clone(cur)
		without(c, x)
		if m.fails(c) {
			cur, best = c, c
		}
	}
	return best
}

// bots tries to remove each bot with everything that names it.
func (m *minimizer) bots(s *Scenario) *Scenario {
	return dropEach(m, s, func(c *Scenario) []Bot { return c.Topology.Bots }, 1, func(c *Scenario, b Bot) { withoutBot(c, b.ID) })
}

// withoutBot removes bot id from c, with its members, faults and app
// subscriptions, and the sources left with no app.
func withoutBot(c *Scenario, id string) {
	c.Topology.Bots = slices.DeleteFunc(c.Topology.Bots, func(b Bot) bool { return b.ID == id })
	c.Topology.Members = slices.DeleteFunc(c.Topology.Members, func(m Member) bool { return m.Bot == id })
	c.Faults.Schedule = slices.DeleteFunc(c.Faults.Schedule, func(f Fault) bool { return f.Bot == id })
	for i := range c.Topology.Sources {
		c.Topology.Sources[i].Apps = slices.DeleteFunc(c.Topology.Sources[i].Apps, func(a string) bool { return a == id })
	}
	var empty []string
	c.Topology.Sources = slices.DeleteFunc(c.Topology.Sources, func(src Source) bool {
		if len(src.Apps) == 0 {
			empty = append(empty, src.Name)
			return true
		}
		return false
	})
	c.Workload.Snapshots = slices.DeleteFunc(c.Workload.Snapshots, func(sn Snapshot) bool { return slices.Contains(empty, sn.Source) })
}

// streams tries to remove each stream with its events, members and faults.
func (m *minimizer) streams(s *Scenario) *Scenario {
	return dropEach(m, s, func(c *Scenario) []Stream { return c.Topology.Streams }, 1, func(c *Scenario, st Stream) {
		c.Topology.Streams = slices.DeleteFunc(c.Topology.Streams, func(x Stream) bool { return x.Name == st.Name })
		c.Topology.Members = slices.DeleteFunc(c.Topology.Members, func(x Member) bool { return x.Stream == st.Name })
		c.Workload.Events = slices.DeleteFunc(c.Workload.Events, func(x Event) bool { return x.Stream == st.Name })
		c.Faults.Schedule = slices.DeleteFunc(c.Faults.Schedule, func(x Fault) bool { return x.Stream == st.Name })
	})
}

// sources tries to remove each snapshot source with its updates.
func (m *minimizer) sources(s *Scenario) *Scenario {
	return dropEach(m, s, func(c *Scenario) []Source { return c.Topology.Sources }, 0, func(c *Scenario, src Source) {
		c.Topology.Sources = slices.DeleteFunc(c.Topology.Sources, func(x Source) bool { return x.Name == src.Name })
		c.Workload.Snapshots = slices.DeleteFunc(c.Workload.Snapshots, func(x Snapshot) bool { return x.Source == src.Name })
	})
}

// nodes tries one engine node fewer (dropping the faults of the last one).
func (m *minimizer) nodes(s *Scenario) *Scenario {
	n := max(1, s.Topology.Nodes)
	if n <= 1 {
		return nil
	}
	last := fmt.Sprintf("node-%d", n)
	c := clone(s)
	c.Topology.Nodes = n - 1
	c.Faults.Schedule = slices.DeleteFunc(c.Faults.Schedule, func(f Fault) bool { return f.Node == last })
	if m.fails(c) {
		return c
	}
	return nil
}

// explicitIDs gives every event its own entry and its id in writing, so
// removing one event does not rename the others (faults name events by id).
func explicitIDs(s *Scenario) {
	evs := s.events()
	var out []Event
	for _, st := range s.Topology.Streams {
		for i, e := range evs[st.Name] {
			id := e.ID
			if id == "" {
				id = fmt.Sprintf("%s-%d", st.Name, i+1)
			}
			out = append(out, Event{Stream: st.Name, At: Duration(e.At), ID: id, Producer: e.Producer})
		}
	}
	slices.SortStableFunc(out, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	s.Workload.Events = out
}

// clone deep-copies what the minimizer edits.
func clone(s *Scenario) *Scenario {
	c := *s
	c.Topology.Streams = slices.Clone(s.Topology.Streams)
	c.Topology.Bots = slices.Clone(s.Topology.Bots)
	c.Topology.Members = slices.Clone(s.Topology.Members)
	c.Topology.Sources = slices.Clone(s.Topology.Sources)
	for i := range c.Topology.Sources {
		c.Topology.Sources[i].Apps = slices.Clone(c.Topology.Sources[i].Apps)
	}
	c.Workload.Events = slices.Clone(s.Workload.Events)
	c.Workload.Snapshots = slices.Clone(s.Workload.Snapshots)
	c.Faults.Schedule = slices.Clone(s.Faults.Schedule)
	c.Engine.Bugs = slices.Clone(s.Engine.Bugs)
	c.Catches = nil
	return &c
}

// WriteMinimized writes m's scenario to path, with a header saying where
// it came from, then the lines of notes (each a "# " comment: how to
// replay it, which the caller knows: the program's own name, the store it
// replays on). The folder must exist.
func WriteMinimized(path string, m *Minimized, origin string, notes ...string) error {
	s := m.Scenario
	data, err := s.Marshal()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Minimized by deliverysim from %s (%d runs, %s).\n", origin, m.Runs, m.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "# before: %s\n# after:  %s\n", m.Before, m.After)
	fmt.Fprintf(&b, "# It fails with %s: %s\n", m.Invariant, strings.ReplaceAll(m.First.Detail, "\n", " "))
	for _, n := range notes {
		fmt.Fprintf(&b, "# %s\n", strings.ReplaceAll(n, "\n", " "))
	}
	b.Write(data)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Describe names, titles and sources the minimized scenario after its
// origin.
func (m *Minimized) Describe(origin string) {
	s := m.Scenario
	if !strings.HasSuffix(s.Name, "-min") {
		s.Name += "-min"
	}
	s.Title = fmt.Sprintf("Minimized: %s fails with %s", origin, m.Invariant)
	s.Description = fmt.Sprintf("Reduced from %s (%s) to %s. The first %s violation: %s",
		origin, m.Before, m.After, m.Invariant, m.First.Detail)
	s.Source = origin
}
