package runtime

import (
	"fmt"
	"sort"
	"strings"
)

// Plants are wire-visible faults planted in the reference runtime (not in
// the engine core, which the simulator's known-bug variants cover): each
// makes `deliverysim chaos` fail one of the rules it judges from outside
// (runtime/PROTOCOL.md, "Rules judged with the declared settings"), so
// that rule is shown to catch something. Certification runs only; the
// zero value is the reference.
type Plants struct {
	// OvercountAcked: /metrics counts every 2xx twice
	// (deliverysim_engine_acked_total above the 2xx answers on the wire).
	OvercountAcked bool
	// ResumeFromStart: every subscription reads its stream from the start
	// (after=0.0, since=0), not from the durable cursor it resumes.
	ResumeFromStart bool
	// SnapshotSkipDeletes: a DELETE change of a snapshot source is taken
	// as delivered without being sent (apps keep deleted files).
	SnapshotSkipDeletes bool
	// SnapshotSlowFeed: each repository state is handed to the engine
	// 30 s after the upstream served it.
	SnapshotSlowFeed bool
	// SnapshotSharedBaseline: the engine computes every app's changes
	// from one delivered state per repository (seed 002's "today":
	// engine.Bugs.SharedSnapshotBaseline), not from each app's own.
	SnapshotSharedBaseline bool
	// RetentionUncounted: /v1/observe reports no retention drops while
	// retention drops held messages (seed 003's counters lost).
	RetentionUncounted bool
	// RetentionKeepsOldest: the per-bot cap on held messages deletes the
	// newest beyond it and keeps the oldest (seed 003's bug; needs
	// serve --retention-scope held and the Postgres store).
	RetentionKeepsOldest bool
}

var plantNames = map[string]func(*Plants){
	"overcount-acked":          func(p *Plants) { p.OvercountAcked = true },
	"resume-from-start":        func(p *Plants) { p.ResumeFromStart = true },
	"snapshot-skip-deletes":    func(p *Plants) { p.SnapshotSkipDeletes = true },
	"snapshot-slow-feed":       func(p *Plants) { p.SnapshotSlowFeed = true },
	"snapshot-shared-baseline": func(p *Plants) { p.SnapshotSharedBaseline = true },
	"retention-uncounted":      func(p *Plants) { p.RetentionUncounted = true },
	"retention-keeps-oldest":   func(p *Plants) { p.RetentionKeepsOldest = true },
}

// PlantNames lists the plants, sorted.
func PlantNames() []string {
	ns := make([]string, 0, len(plantNames))
	for n := range plantNames {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// ParsePlants reads a comma-separated list of plant names ("" = none).
func ParsePlants(s string) (Plants, error) {
	var p Plants
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		set, ok := plantNames[n]
		if !ok {
			return p, fmt.Errorf("unknown plant %q; known: %s", n, strings.Join(PlantNames(), ", "))
		}
		set(&p)
	}
	return p, nil
}
