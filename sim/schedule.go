package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/deliverysim/deliverysim/faults"
)

// Fault is one explicitly scheduled fault (faults.Fault documents what
// each kind reads).
type Fault = faults.Fault

// Forever is an Until that never comes (faults.Forever).
const Forever = faults.Forever

// Fired is one fault a run injected, exactly where it fired.
type Fired struct {
	faults.Fault
	// Scheduled: it came from Config.Schedule (else from the seed's plan).
	Scheduled bool
}

// ValidateSchedule checks every fault on its own (faults.Fault.Validate)
// and that it names things the workload has.
func ValidateSchedule(w Workload, sched []Fault) error {
	names := map[string]map[string]bool{"node": {}, "bot": {}, "stream": {}}
	for _, n := range nodeNames(w) {
		names["node"][n] = true
	}
	for _, b := range w.Bots {
		names["bot"][b.ID] = true
	}
	for _, s := range w.Streams {
		names["stream"][s.Name] = true
	}
	for i, f := range sched {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("fault schedule entry %d (%s): %s", i+1, f.Kind, fmt.Sprintf(format, args...))
		}
		if err := f.Validate(); err != nil {
			return bad("%v", err)
		}
		value := map[string]string{"node": f.Node, "bot": f.Bot, "stream": f.Stream}
		need, optional := f.Targets()
		for _, t := range append(slices.Clone(need), optional...) {
			v := value[t]
			if names[t][v] || (v == "" && slices.Contains(optional, t)) {
				continue
			}
			switch t {
			case "node":
				return bad("node %q is not one of node-1..node-%d", v, w.Nodes)
			default:
				return bad("%s %q is not in the workload", t, v)
			}
		}
	}
	return nil
}

func nodeNames(w Workload) []string {
	out := make([]string, w.Nodes)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i+1)
	}
	return out
}

// drawSchedule draws the seed's schedule from its plan, before anything
// runs.
func (s *sim) drawSchedule() {
	world := faults.World{Nodes: nodeNames(s.w), Window: s.w.FaultWindow}
	for _, b := range s.w.Bots {
		world.Bots = append(world.Bots, b.ID)
	}
	for _, st := range s.w.Streams {
		world.Streams = append(world.Streams, st.Name)
	}
	s.drawn = s.plan.Schedule(s.cfg.Seed, world)
	s.chances = s.drawn.Index()
}

// elapsed is the virtual time since Epoch.
func (s *sim) elapsed() time.Duration { return s.now.Sub(Epoch) }

// chance rolls, on r, the drawn chance for site, if there is one and the
// fault window is open.
func (s *sim) chance(site faults.Site, r *rand.Rand) (faults.Chance, bool) {
	if !s.active {
		return faults.Chance{}, false
	}
	c, ok := s.chances.Chance(&site)
	if !ok || !roll(r, c.Rate) {
		return faults.Chance{}, false
	}
	return c, true
}

// drawnClock is the drawn chance of a clock kind for site: it needs no
// coin (it applies at every boot in the fault window).
func (s *sim) drawnClock(site faults.Site) (faults.Chance, bool) {
	if !s.active {
		return faults.Chance{}, false
	}
	return s.chances.Chance(&site)
}

// permute applies a scheduled reorder: element i goes to order[i]. A
// missing or malformed order reverses the batch.
func permute[T any](xs []T, order []int) []T {
	out := make([]T, len(xs))
	ok := len(order) == len(xs)
	seen := make([]bool, len(xs))
	for _, o := range order {
		if !ok || o < 0 || o >= len(xs) || seen[o] {
			ok = false
			break
		}
		seen[o] = true
	}
	for i, x := range xs {
		if ok {
			out[order[i]] = x
		} else {
			out[len(xs)-1-i] = x
		}
	}
	return out
}
