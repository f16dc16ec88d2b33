package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/triage"
)

// cmdTriage compares a baseline report with the reports of a new build
// (package triage classifies; this reads the files, merges sweep shards and
// writes the outputs). Exit 1 when a class named by --fail-on has findings.
func (a *app) cmdTriage(args []string) (int, error) {
	fs := newFlagSet("triage", a.stderr)
	jsonOut := fs.Bool("json", false, "print the triage report as JSON (it can be the baseline of the next triage)")
	junit := fs.String("junit", "", "write the new and regressed findings as JUnit XML failures to this file")
	failOnS := fs.String("fail-on", "new,regressed", "exit 1 when any of these classes has findings: new, ongoing, resolved, regressed, flaky, or none")
	files, err := a.parseWithArgs(fs, args)
	if err != nil {
		return 2, err
	}
	failOn, err := parseFailOn(*failOnS)
	if err != nil {
		return 2, err
	}
	if len(files) < 2 {
		return 2, usagef("triage: give the baseline report and at least one new one, like: deliverysim triage last-green.json tonight.json")
	}
	if *junit != "" {
		if err := checkWritableFile("--junit", *junit); err != nil {
			return 2, usagef("%v", err)
		}
	}
	old, err := a.readTriageRun(files[0])
	if err != nil {
		return 2, err
	}
	if triage.IsShard(readOrNil(files[0])) {
		return 2, usagef("triage: the baseline %s is one shard of a sweep; merge its shards first (deliverysim merge --json shard-*.json > baseline.json)", files[0])
	}
	news, err := a.readNewRuns(files[1:])
	if err != nil {
		return 2, err
	}
	res, err := triage.Classify(old, news)
	if err != nil {
		return 2, usagef("triage: %v", err)
	}
	rep := triage.NewReport(res, files[0], files[1:], failOn)
	if *junit != "" {
		if err := writeJUnit(*junit, triageJUnit(rep)); err != nil {
			return 2, fmt.Errorf("--junit: %v", err)
		}
	}
	if *jsonOut {
		if err := writeJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		printTriage(a.stdout, rep)
	}
	a.annotateTriage(rep)
	if a.interrupted() {
		return exitInterrupted, nil
	}
	if rep.Failed {
		return 1, nil
	}
	return 0, nil
}

func parseFailOn(s string) ([]triage.Status, error) {
	out := []triage.Status{}
	if strings.TrimSpace(s) == "none" {
		return out, nil
	}
	for _, p := range strings.Split(s, ",") {
		st := triage.Status(strings.TrimSpace(p))
		if !slices.Contains(triage.Statuses(), st) {
			return nil, usagef("--fail-on %q: %q is not a class; use new, ongoing, resolved, regressed, flaky (comma-separated) or none", s, p)
		}
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return out, nil
}

// readOrNil is the content of a file readTriageRun has already read
// (nil if it has gone since; IsShard then says no).
func readOrNil(path string) []byte {
	data, _ := readBoundedFile(path, maxReportBytes)
	return data
}

// maxReportBytes bounds a report file, as merge does.
const maxReportBytes = 256 << 20

func (a *app) readTriageRun(path string) (triage.Run, error) {
	data, err := readBoundedFile(path, maxReportBytes)
	if err != nil {
		return triage.Run{}, usagef("triage: %v", err)
	}
	run, err := triage.Parse(path, data)
	if err != nil {
		return triage.Run{}, usagef("triage: %v", err)
	}
	return run, nil
}

// readNewRuns reads the new reports. Shards of one sweep are merged into
// the sweep's report first (merge's own checks: every shard once, one
// sweep), so shards and their merge triage the same; other reports are
// repeats of the new build.
func (a *app) readNewRuns(files []string) ([]triage.Run, error) {
	var shards, others []string
	for _, f := range files {
		data, err := readBoundedFile(f, maxReportBytes)
		if err != nil {
			return nil, usagef("triage: %v", err)
		}
		if triage.IsShard(data) {
			shards = append(shards, f)
		} else {
			others = append(others, f)
		}
	}
	var runs []triage.Run
	if len(shards) > 0 {
		reps, err := readShardReports("triage", shards)
		if err != nil {
			return nil, err
		}
		merged, err := mergeReports(shards, reps)
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(merged)
		if err != nil {
			return nil, err
		}
		run, err := triage.Parse("the merge of "+strings.Join(shards, ", "), data)
		if err != nil {
			return nil, usagef("triage: %v", err)
		}
		runs = append(runs, run)
	}
	for _, f := range others {
		run, err := a.readTriageRun(f)
		if err != nil {
			return nil, err
		}
		if run.Triage {
			return nil, usagef("triage: %s is a triage report; it can only be the baseline (the first file)", f)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func printTriage(w io.Writer, rep triage.Report) {
	fmt.Fprintf(w, "triage of %s reports (%s) against %s:", rep.Of, orNoSettings(rep.Settings), rep.Baseline)
	for _, st := range triage.Statuses() {
		fmt.Fprintf(w, " %s %d,", st, rep.Counts[st])
	}
	fmt.Fprintf(w, " unjudged %d\n", len(rep.Unjudged))
	for _, st := range triage.Statuses() {
		if len(rep.Findings[st]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d):\n", strings.ToUpper(string(st)), len(rep.Findings[st]))
		// One line per subject (a seed's findings share its first
		// violation and its reproduce line); findings come sorted by it.
		fs := rep.Findings[st]
		for i := 0; i < len(fs); {
			j, invs := i, []string{}
			for ; j < len(fs) && fs[j].Subject() == fs[i].Subject(); j++ {
				invs = append(invs, fs[j].Invariant)
			}
			f := fs[i]
			fmt.Fprintf(w, "  %s: %s\n", f.Subject(), strings.Join(invs, ", "))
			if f.Detail != "" && st != triage.Resolved {
				fmt.Fprintf(w, "    %s\n", firstLineOf(f.Detail))
			}
			if f.Reproduce != "" && (st == triage.New || st == triage.Regressed || st == triage.Flaky) {
				fmt.Fprintf(w, "    reproduce: %s\n", f.Reproduce)
			}
			i = j
		}
	}
	if len(rep.Unjudged) > 0 {
		fmt.Fprintf(w, "\nUNJUDGED (%d): failing in the baseline, not run by the new reports\n", len(rep.Unjudged))
	}
	verdict := "PASS"
	if rep.Failed {
		verdict = "FAIL"
	}
	names := make([]string, len(rep.FailOn))
	for i, s := range rep.FailOn {
		names[i] = string(s)
	}
	fmt.Fprintf(w, "\nverdict: %s (fails on: %s)\n", verdict, cmp.Or(strings.Join(names, ","), "none"))
}

func orNoSettings(s string) string {
	if s == "" {
		return "no settings"
	}
	return s
}

func firstLineOf(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// triageFailure is a finding CI is told about (JUnit, annotations): a new
// or a regressed one.
type triageFailure struct {
	st triage.Status
	f  triage.Finding
}

func triageFailures(rep triage.Report) []triageFailure {
	var out []triageFailure
	for _, st := range []triage.Status{triage.New, triage.Regressed} {
		for _, f := range rep.Findings[st] {
			out = append(out, triageFailure{st, f})
		}
	}
	return out
}

func triageJUnit(rep triage.Report) xunitSuites {
	cases := []xunitCase{}
	for _, x := range triageFailures(rep) {
		text := x.f.Detail
		if x.f.Reproduce != "" {
			text += "\nreproduce: " + x.f.Reproduce
		}
		cases = append(cases, xunitCase{Classname: "deliverysim.triage." + rep.Of, Name: fmt.Sprintf("%s %s on %s", x.st, x.f.Invariant, x.f.Subject()),
			Time: "0", Failure: &xunitMessage{Message: firstLineOf(x.f.Detail), Type: string(x.st), Text: text}})
	}
	return xunitSuites{Name: "deliverysim triage", Suites: []xunitSuite{suite("triage of "+rep.Of, time.Duration(0), cases)}}
}

func (a *app) annotateTriage(rep triage.Report) {
	for i, x := range triageFailures(rep) {
		if i == maxAnnotations {
			break
		}
		msg := x.f.Detail
		if x.f.Reproduce != "" {
			msg += "\nreproduce: " + x.f.Reproduce
		}
		a.annotate(annotation{title: fmt.Sprintf("deliverysim triage: %s finding: %s on %s", x.st, x.f.Invariant, x.f.Subject()), msg: msg})
	}
}
