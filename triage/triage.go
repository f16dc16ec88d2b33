// Package triage compares the findings of runs of the harness across
// builds: which failures are new, which are the ones already known, which
// went away, which came back and which are flaky. It reads the --json
// reports of sweep (and merge), scenarios, certify and chaos, and its own
// report, which it can read back as the baseline of the next comparison.
//
// A finding is identified by what failed and where, never by text: an
// invariant with the seed it failed on (sweep, chaos), or a check with the
// name of what was checked (a scenario, a conformance check). The detail
// and the reproduce line of a finding travel with it but are not part of
// its identity, so a reworded message is the same finding.
package triage

import (
	"fmt"
	"sort"
	"strconv"
)

// Finding is one failure: an invariant (or, for certify, the check's
// group) on one subject (a seed, or a check's name).
type Finding struct {
	Invariant string  `json:"invariant"`
	Seed      *uint64 `json:"seed,omitempty"`
	Check     string  `json:"check,omitempty"`
	// Detail and Reproduce are what the newest report that has the
	// finding says about it; they are not part of its identity.
	Detail    string `json:"detail,omitempty"`
	Reproduce string `json:"reproduce,omitempty"`
}

// ID is the finding's identity: invariant and subject.
func (f Finding) ID() string {
	if f.Seed != nil {
		return f.Invariant + "@seed=" + strconv.FormatUint(*f.Seed, 10)
	}
	return f.Invariant + "@check=" + f.Check
}

// Subject is what was run: "seed=N" or "check=NAME".
func (f Finding) Subject() string {
	if f.Seed != nil {
		return "seed=" + strconv.FormatUint(*f.Seed, 10)
	}
	return "check=" + f.Check
}

// Run is what one report says: which findings it failed, and which
// subjects it judged (a finding it judged and did not fail passed).
type Run struct {
	// Name is the report's file (Parse's name), for messages.
	Name string
	// Kind is the report's command: sweep, scenarios, certify or chaos.
	Kind string
	// Settings are the settings two comparable runs share (backend, fault
	// plan, ...), as one line. The engine variant (--bugs, the engine
	// command) is not among them: it is what changes between builds.
	Settings string
	// Failing is every finding the run failed, by ID.
	Failing map[string]Finding
	// judged tells whether the run ran f's subject to a verdict on f's
	// invariant. nil: it judged nothing (a triage report read back).
	judged func(Finding) bool
	// Known are findings an earlier triage saw resolved and that have
	// not failed since (only a triage report read back has them): one
	// failing again is regressed rather than new.
	Known map[string]Finding
	// Triage: read from a triage report, which can only be a baseline (it
	// judged nothing itself).
	Triage bool
}

// Judged tells whether the run ran f's subject to a verdict on f.
func (r *Run) Judged(f Finding) bool {
	if _, ok := r.Failing[f.ID()]; ok {
		return true
	}
	return r.judged != nil && r.judged(f)
}

// Status is a finding's class.
type Status string

const (
	New       Status = "new"       // fails now; the baseline neither failed it nor knew it resolved
	Ongoing   Status = "ongoing"   // failed in the baseline and fails now
	Resolved  Status = "resolved"  // failed in the baseline and passes now
	Regressed Status = "regressed" // known resolved by an earlier triage, fails again now
	Flaky     Status = "flaky"     // fails in one of the new runs and passes in another
)

// Statuses lists the classes in report order.
func Statuses() []Status { return []Status{New, Ongoing, Resolved, Regressed, Flaky} }

// Result is the classification of every finding.
type Result struct {
	Kind     string
	Settings string
	// Classes holds each class's findings, sorted by ID.
	Classes map[Status][]Finding
	// Unjudged are findings the baseline failed (or had not judged either)
	// that no new run judged: a sweep of other seeds says nothing about
	// them. A triage report keeps them as failing, so they stay known.
	Unjudged []Finding
	// Known is what the next triage needs to tell regressed from new:
	// every finding seen resolved (now or by an earlier triage) that does
	// not fail now.
	Known []Finding
}

// Classify compares the baseline old with the new runs, which are runs of
// the same build (one run, or repeats: a finding that fails in one and
// passes in another is flaky). Runs of different kinds or settings are not
// comparable and are refused.
func Classify(old Run, news []Run) (Result, error) {
	if len(news) == 0 {
		return Result{}, fmt.Errorf("no new report to compare with the baseline")
	}
	for _, n := range news {
		if n.Kind != old.Kind {
			return Result{}, fmt.Errorf("%s is a %s report and the baseline %s a %s report; triage compares reports of one kind", n.Name, n.Kind, old.Name, old.Kind)
		}
		if n.Settings != old.Settings {
			return Result{}, fmt.Errorf("%s ran with other settings than the baseline %s (%s; baseline: %s); findings of different settings are not comparable", n.Name, old.Name, orNone(n.Settings), orNone(old.Settings))
		}
	}
	all := map[string]Finding{}
	for id, f := range old.Failing {
		all[id] = f
	}
	// The newest report's text wins: it is what an engineer acts on.
	for _, n := range news {
		for id, f := range n.Failing {
			all[id] = f
		}
	}
	res := Result{Kind: old.Kind, Settings: old.Settings, Classes: map[Status][]Finding{}}
	for _, st := range Statuses() {
		res.Classes[st] = []Finding{}
	}
	known := map[string]Finding{}
	for id, f := range old.Known {
		known[id] = f
	}
	for id, f := range all {
		failing, passing := 0, 0
		for i := range news {
			if _, ok := news[i].Failing[id]; ok {
				failing++
			} else if news[i].Judged(f) {
				passing++
			}
		}
		_, oldFailed := old.Failing[id]
		_, wasKnown := old.Known[id]
		switch {
		case failing > 0 && passing > 0:
			res.Classes[Flaky] = append(res.Classes[Flaky], f)
			delete(known, id)
		case failing > 0 && oldFailed:
			res.Classes[Ongoing] = append(res.Classes[Ongoing], f)
		case failing > 0 && wasKnown:
			res.Classes[Regressed] = append(res.Classes[Regressed], f)
			delete(known, id)
		case failing > 0:
			res.Classes[New] = append(res.Classes[New], f)
		case passing > 0 && oldFailed:
			res.Classes[Resolved] = append(res.Classes[Resolved], f)
			known[id] = f
		case oldFailed:
			res.Unjudged = append(res.Unjudged, f)
		}
	}
	for _, st := range Statuses() {
		sortFindings(res.Classes[st])
	}
	sortFindings(res.Unjudged)
	for _, f := range known {
		res.Known = append(res.Known, f)
	}
	sortFindings(res.Known)
	if res.Unjudged == nil {
		res.Unjudged = []Finding{}
	}
	if res.Known == nil {
		res.Known = []Finding{}
	}
	return res, nil
}

// Count is the number of findings in class st.
func (r Result) Count(st Status) int { return len(r.Classes[st]) }

// sortFindings orders findings by subject (seeds numerically), then
// invariant, so a report does not depend on map order.
func sortFindings(fs []Finding) {
	sort.Slice(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if (a.Seed == nil) != (b.Seed == nil) {
			return a.Seed != nil
		}
		if a.Seed != nil && *a.Seed != *b.Seed {
			return *a.Seed < *b.Seed
		}
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		return a.Invariant < b.Invariant
	})
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
