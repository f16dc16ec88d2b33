package triage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// SchemaVersion is the schema_version of the reports read here and of the
// triage report.
const SchemaVersion = 1

// Report is the JSON of `deliverysim triage --json`. Read back (Parse),
// it is a baseline: its failing findings (new, ongoing, regressed, flaky
// and unjudged) failed before, and its known_resolved ones were seen
// resolved, so one of them failing again is regressed.
type Report struct {
	SchemaVersion int                  `json:"schema_version"`
	Kind          string               `json:"kind"` // always "triage": how a baseline is told from the reports it compares
	Of            string               `json:"of"`   // the kind of the reports compared
	Settings      string               `json:"settings"`
	Baseline      string               `json:"baseline"`
	Reports       []string             `json:"reports"`
	Counts        map[Status]int       `json:"counts"`
	Findings      map[Status][]Finding `json:"findings"`
	Unjudged      []Finding            `json:"unjudged"`
	KnownResolved []Finding            `json:"known_resolved"`
	FailOn        []Status             `json:"fail_on"`
	Failed        bool                 `json:"failed"`
}

// NewReport is the report of res.
func NewReport(res Result, baseline string, reports []string, failOn []Status) Report {
	r := Report{SchemaVersion: SchemaVersion, Kind: "triage", Of: res.Kind, Settings: res.Settings,
		Baseline: baseline, Reports: reports, Counts: map[Status]int{}, Findings: res.Classes,
		Unjudged: res.Unjudged, KnownResolved: res.Known, FailOn: failOn}
	for _, st := range Statuses() {
		r.Counts[st] = res.Count(st)
	}
	for _, st := range failOn {
		if r.Counts[st] > 0 {
			r.Failed = true
		}
	}
	return r
}

// Parse reads one --json report of sweep (or merge), scenarios, certify,
// chaos or triage. name names it in errors.
func Parse(name string, data []byte) (Run, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return Run{}, fmt.Errorf("%s is not a JSON report: %v", name, err)
	}
	var v int
	if err := json.Unmarshal(probe["schema_version"], &v); err != nil || v != SchemaVersion {
		return Run{}, fmt.Errorf("%s has no schema_version %d (a --json report of sweep, merge, scenarios, certify, chaos or triage)", name, SchemaVersion)
	}
	has := func(k string) bool { _, ok := probe[k]; return ok }
	var (
		run Run
		err error
	)
	switch {
	case string(probe["kind"]) == `"triage"`:
		run, err = parseTriage(data)
	case has("failing_seeds"):
		run, err = parseSweep(data)
	case has("scenarios"):
		run, err = parseScenarios(data)
	case has("guarantees") && has("results"):
		run, err = parseCertify(data)
	case has("engine_cmd") && has("verdicts"):
		run, err = parseChaos(data)
	default:
		return Run{}, fmt.Errorf("%s is not a report triage reads (sweep, merge, scenarios, certify, chaos or triage --json)", name)
	}
	if err != nil {
		return Run{}, fmt.Errorf("%s: %v", name, err)
	}
	run.Name = name
	return run, nil
}

func decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	return dec.Decode(v)
}

func seedPtr(s uint64) *uint64 { return &s }

type sweepJSON struct {
	Seeds string `json:"seeds"`
	Shard *struct {
		Index int    `json:"index"`
		Count int    `json:"count"`
		Seeds string `json:"seeds"`
	} `json:"shard"`
	Backend           string `json:"backend"`
	Plan              string `json:"plan"`
	SeedsRun          uint64 `json:"seeds_run"`
	Interrupted       bool   `json:"interrupted"`
	FailingSeedsTotal uint64 `json:"failing_seeds_total"`
	FailingSeeds      []struct {
		Seed       uint64   `json:"seed"`
		Invariants []string `json:"invariants"`
		First      string   `json:"first"`
		Reproduce  string   `json:"reproduce"`
	} `json:"failing_seeds"`
	ErrorsTotal uint64 `json:"errors_total"`
	Errors      []struct {
		Seed uint64 `json:"seed"`
	} `json:"errors"`
	Determinism *json.RawMessage `json:"determinism"`
}

// IsShard tells whether data is the report of one shard of a sweep (sweep
// --shard I/N --json), which is merged with its sibling shards before it is
// compared.
func IsShard(data []byte) bool {
	var r sweepJSON
	return decode(data, &r) == nil && r.Shard != nil
}

func parseRange(s string) (lo, hi uint64, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if lo, err = strconv.ParseUint(a, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("seed range %q is not A-B", s)
	}
	hi = lo
	if isRange {
		if hi, err = strconv.ParseUint(b, 10, 64); err != nil || hi < lo {
			return 0, 0, fmt.Errorf("seed range %q is not A-B", s)
		}
	}
	return lo, hi, nil
}

// parseSweep: a finding per failing seed and invariant. A seed is judged
// when the sweep ran it to a verdict: in its range (its shard's part),
// among the seeds run before an interruption (seeds report in order), not
// a seed that could not run, and within what the report lists (it lists
// the lowest 1000 failing seeds and errors: beyond the last one listed, a
// seed absent from the list may have failed).
func parseSweep(data []byte) (Run, error) {
	var r sweepJSON
	if err := decode(data, &r); err != nil {
		return Run{}, fmt.Errorf("not a sweep report: %v", err)
	}
	rng := r.Seeds
	if r.Shard != nil {
		rng = r.Shard.Seeds
	}
	empty := rng == ""
	var lo, hi uint64
	if !empty {
		var err error
		if lo, hi, err = parseRange(rng); err != nil {
			return Run{}, err
		}
	}
	if r.Interrupted {
		if n := r.SeedsRun + r.ErrorsTotal; n == 0 {
			empty = true
		} else {
			hi = min(hi, lo+n-1)
		}
	}
	limit := hi
	if n := len(r.FailingSeeds); uint64(n) < r.FailingSeedsTotal && n > 0 {
		limit = min(limit, r.FailingSeeds[n-1].Seed)
	}
	errs := map[uint64]bool{}
	for _, e := range r.Errors {
		errs[e.Seed] = true
	}
	if n := len(r.Errors); uint64(n) < r.ErrorsTotal && n > 0 {
		limit = min(limit, r.Errors[n-1].Seed)
	}
	run := Run{Kind: "sweep", Failing: map[string]Finding{},
		Settings: fmt.Sprintf("backend=%s plan=%q check-determinism=%t", r.Backend, r.Plan, r.Determinism != nil)}
	for _, fs := range r.FailingSeeds {
		for _, inv := range fs.Invariants {
			f := Finding{Invariant: inv, Seed: seedPtr(fs.Seed), Detail: fs.First, Reproduce: fs.Reproduce}
			run.Failing[f.ID()] = f
		}
	}
	run.judged = func(f Finding) bool {
		return !empty && f.Seed != nil && *f.Seed >= lo && *f.Seed <= limit && !errs[*f.Seed]
	}
	return run, nil
}

// parseScenarios: a finding per failing scenario and invariant it got
// beyond its expectation, or expected and did not get ("expected X").
func parseScenarios(data []byte) (Run, error) {
	var r struct {
		Scenarios []struct {
			Name      string   `json:"name"`
			Expected  []string `json:"expected_violations"`
			Ran       bool     `json:"ran"`
			Got       []string `json:"got_violations"`
			Passed    bool     `json:"passed"`
			Note      string   `json:"note"`
			Reproduce string   `json:"reproduce"`
		} `json:"scenarios"`
	}
	if err := decode(data, &r); err != nil {
		return Run{}, fmt.Errorf("not a scenarios report: %v", err)
	}
	run := Run{Kind: "scenarios", Failing: map[string]Finding{}}
	ran := map[string]bool{}
	for _, s := range r.Scenarios {
		ran[s.Name] = s.Ran
		if !s.Ran || s.Passed {
			continue
		}
		var invs []string
		for _, g := range s.Got {
			if !slices.Contains(s.Expected, g) {
				invs = append(invs, g)
			}
		}
		for _, e := range s.Expected {
			if !slices.Contains(s.Got, e) {
				invs = append(invs, "expected "+e)
			}
		}
		if len(invs) == 0 {
			invs = []string{"expectation"}
		}
		for _, inv := range invs {
			f := Finding{Invariant: inv, Check: s.Name, Detail: s.Note, Reproduce: s.Reproduce}
			run.Failing[f.ID()] = f
		}
	}
	run.judged = func(f Finding) bool { return f.Seed == nil && ran[f.Check] }
	return run, nil
}

// parseCertify: a finding per failed check (and backend configuration);
// its invariant is the check's group. Skipped checks are not judged.
func parseCertify(data []byte) (Run, error) {
	var r struct {
		Backend string `json:"backend"`
		Runs    []struct {
			Variant string `json:"variant"`
		} `json:"runs"`
		Results []struct {
			Name    string `json:"name"`
			Group   string `json:"group"`
			Variant string `json:"variant"`
			Status  string `json:"status"`
			Summary string `json:"summary"`
		} `json:"results"`
	}
	if err := decode(data, &r); err != nil {
		return Run{}, fmt.Errorf("not a certify report: %v", err)
	}
	var variants []string
	for _, s := range r.Runs {
		variants = append(variants, s.Variant)
	}
	sort.Strings(variants)
	run := Run{Kind: "certify", Failing: map[string]Finding{},
		Settings: fmt.Sprintf("backend=%s runs=%q", r.Backend, strings.Join(variants, ","))}
	ran := map[string]bool{}
	for _, res := range r.Results {
		check := res.Name
		if res.Variant != "" {
			check += " (" + res.Variant + ")"
		}
		switch res.Status {
		case "fail":
			f := Finding{Invariant: res.Group, Check: check, Detail: res.Summary}
			run.Failing[f.ID()] = f
			ran[check] = true
		case "pass":
			ran[check] = true
		}
	}
	run.judged = func(f Finding) bool { return f.Seed == nil && ran[f.Check] }
	return run, nil
}

// parseChaos: a finding per invariant the run's violations break, on its
// seed. An invariant is judged when its verdict is PASS or FAIL (not "not
// judged"), and not at all in a run cut short by a signal (its losses and
// liveness were never settled). Its settings are its flags but the seed.
func parseChaos(data []byte) (Run, error) {
	var r struct {
		Seed       uint64            `json:"seed"`
		Args       []string          `json:"args"`
		Invariants map[string]string `json:"invariants"`
		Violations []struct {
			Invariant string `json:"invariant"`
			Detail    string `json:"detail"`
		} `json:"violations"`
		Interrupted bool `json:"interrupted"`
	}
	if err := decode(data, &r); err != nil {
		return Run{}, fmt.Errorf("not a chaos report: %v", err)
	}
	var settings []string
	for i := 0; i < len(r.Args); i++ {
		if r.Args[i] == "--seed" {
			i++
			continue
		}
		settings = append(settings, r.Args[i])
	}
	run := Run{Kind: "chaos", Failing: map[string]Finding{}, Settings: strings.Join(settings, " ")}
	for _, v := range r.Violations {
		f := Finding{Invariant: v.Invariant, Seed: seedPtr(r.Seed), Detail: v.Detail}
		if _, dup := run.Failing[f.ID()]; !dup {
			run.Failing[f.ID()] = f
		}
	}
	run.judged = func(f Finding) bool {
		if r.Interrupted || f.Seed == nil || *f.Seed != r.Seed {
			return false
		}
		v := r.Invariants[f.Invariant]
		return v == "PASS" || v == "FAIL"
	}
	return run, nil
}

// parseTriage reads a triage report back as a baseline.
func parseTriage(data []byte) (Run, error) {
	var r Report
	if err := decode(data, &r); err != nil {
		return Run{}, fmt.Errorf("not a triage report: %v", err)
	}
	run := Run{Kind: r.Of, Settings: r.Settings, Failing: map[string]Finding{}, Known: map[string]Finding{}, Triage: true}
	for _, st := range []Status{New, Ongoing, Regressed, Flaky} {
		for _, f := range r.Findings[st] {
			run.Failing[f.ID()] = f
		}
	}
	for _, f := range r.Unjudged {
		run.Failing[f.ID()] = f
	}
	for _, f := range r.KnownResolved {
		run.Known[f.ID()] = f
	}
	return run, nil
}
