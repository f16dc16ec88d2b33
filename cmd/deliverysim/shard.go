package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/deliverysim/deliverysim/sim"
)

// maxShards bounds --shard's N: more shards than that are more CI jobs than
// seeds worth splitting.
const maxShards = 10000

// parseShard reads --shard: "I/N" (1-based), or "N" with the index taken
// from $JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's 0-based index).
func parseShard(s string, getenv func(string) string) (*shardInfo, error) {
	if s == "" {
		return nil, nil
	}
	is, ns, hasIndex := strings.Cut(s, "/")
	if !hasIndex {
		ns = is
		env := getenv("JOB_COMPLETION_INDEX")
		if env == "" {
			return nil, usagef("--shard %q names no index and $JOB_COMPLETION_INDEX is not set; write --shard I/N (1 <= I <= N)", s)
		}
		idx, err := strconv.Atoi(strings.TrimSpace(env))
		if err != nil || idx < 0 {
			return nil, usagef("$JOB_COMPLETION_INDEX %q is not a non-negative integer", env)
		}
		is = strconv.Itoa(idx + 1)
	}
	i, err1 := strconv.Atoi(strings.TrimSpace(is))
	n, err2 := strconv.Atoi(strings.TrimSpace(ns))
	if err1 != nil || err2 != nil || n < 1 || n > maxShards || i < 1 || i > n {
		return nil, usagef("--shard %q: want I/N with 1 <= I <= N <= %d, like 2/8", s, maxShards)
	}
	return &shardInfo{Index: i, Count: n}, nil
}

// shardRange is shard i (1-based) of n of [lo, hi]: contiguous parts whose
// sizes differ by at most one, the larger ones first.
func shardRange(lo, hi uint64, i, n int) (slo, shi uint64, empty bool) {
	total := hi - lo + 1 // parseSeedRange keeps this far below 2^64
	size, rem := total/uint64(n), total%uint64(n)
	k := uint64(i - 1)
	start := lo + k*size + min(k, rem)
	count := size
	if k < rem {
		count++
	}
	if count == 0 {
		return 0, 0, true
	}
	return start, start + count - 1, false
}

// cmdMerge combines shard reports (sweep --shard I/N --json) into the
// report of the whole range, with sweep's exit status rules.
func (a *app) cmdMerge(args []string) (int, error) {
	fs := newFlagSet("merge", a.stderr)
	jsonOut := fs.Bool("json", false, "print the merged JSON report on stdout")
	files, err := a.parseWithArgs(fs, args)
	if err != nil {
		return 2, err
	}
	if len(files) == 0 {
		return 2, usagef("merge: give the shard reports to merge, like: deliverysim merge shard-*.json")
	}
	reps, err := readShardReports("merge", files)
	if err != nil {
		return 2, err
	}
	rep, err := mergeReports(files, reps)
	if err != nil {
		return 2, err
	}
	if *jsonOut {
		if err := writeJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		printSweep(a.stdout, rep)
	}
	a.annotateSweep(rep)
	return sweepExit(rep), nil
}

// readShardReports reads sweep reports for cmd (merge, triage), strictly:
// a field it does not know means a report of another kind or version.
func readShardReports(cmd string, files []string) ([]sweepReport, error) {
	var reps []sweepReport
	for _, f := range files {
		data, err := readBoundedFile(f, maxReportBytes)
		if err != nil {
			return nil, usagef("%s: %v", cmd, err)
		}
		var r sweepReport
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, usagef("%s: %s is not a sweep report (deliverysim sweep --json): %v", cmd, f, err)
		}
		if r.SchemaVersion != schemaVersion {
			return nil, usagef("%s: %s has schema_version %d; this deliverysim reads %d", cmd, f, r.SchemaVersion, schemaVersion)
		}
		reps = append(reps, r)
	}
	return reps, nil
}

// mergeReports checks that reps are the shards 1..N of one sweep, each
// once, and adds them up. A merged report equals the report of the same
// sweep run whole.
func mergeReports(files []string, reps []sweepReport) (sweepReport, error) {
	first := reps[0]
	if first.Shard == nil {
		return sweepReport{}, usagef("merge: %s is not a shard report (it has no \"shard\"; run sweep --shard I/N --json)", files[0])
	}
	n := first.Shard.Count
	seen := make([]bool, n+1)
	out := first
	out.Shard = nil
	// Each shard's resources are its own process's; summing peaks or
	// seconds of processes that may have run at once means nothing.
	out.Resources = nil
	out.SeedsPlanned, out.SeedsRun, out.ViolationsTotal, out.FailingSeedsTotal, out.ErrorsTotal = 0, 0, 0, 0, 0
	out.FailingSeeds, out.Errors = []failingSeed{}, []seedError{}
	out.Invariants, out.Faults = map[string]int{}, map[string]int{}
	out.Counters = sim.Counters{}
	out.Coverage = make([]coverageRow, len(first.Coverage))
	for i, row := range first.Coverage {
		out.Coverage[i] = coverageRow{Name: row.Name, Doc: row.Doc}
	}
	if first.Determinism != nil {
		out.Determinism = &determinismInfo{Nondeterministic: []uint64{}}
	}
	for i, r := range reps {
		f := files[i]
		if r.Shard == nil || r.Shard.Count != n || r.Shard.Index < 1 || r.Shard.Index > n {
			return sweepReport{}, usagef("merge: %s is not a shard of the same %d-shard sweep", f, n)
		}
		if r.Seeds != first.Seeds || r.Backend != first.Backend || r.Plan != first.Plan ||
			!slices.Equal(r.Bugs, first.Bugs) || (r.Determinism == nil) != (first.Determinism == nil) {
			return sweepReport{}, usagef("merge: %s is from a different sweep than %s (seeds, backend, plan, bugs and --check-determinism must match)", f, files[0])
		}
		if seen[r.Shard.Index] {
			return sweepReport{}, usagef("merge: shard %d/%d is given twice (%s)", r.Shard.Index, n, f)
		}
		seen[r.Shard.Index] = true
		out.SeedsPlanned += r.SeedsPlanned
		out.SeedsRun += r.SeedsRun
		out.Interrupted = out.Interrupted || r.Interrupted
		out.ViolationsTotal += r.ViolationsTotal
		out.FailingSeedsTotal += r.FailingSeedsTotal
		out.ErrorsTotal += r.ErrorsTotal
		out.FailingSeeds = append(out.FailingSeeds, r.FailingSeeds...)
		out.Errors = append(out.Errors, r.Errors...)
		for k, v := range r.Invariants {
			out.Invariants[k] += v
		}
		for k, v := range r.Faults {
			out.Faults[k] += v
		}
		out.Counters.Add(r.Counters)
		if len(r.Coverage) != len(out.Coverage) {
			return sweepReport{}, usagef("merge: %s has a different coverage catalogue than %s (built from another version?)", f, files[0])
		}
		for j, row := range r.Coverage {
			if row.Name != out.Coverage[j].Name {
				return sweepReport{}, usagef("merge: %s has a different coverage catalogue than %s (built from another version?)", f, files[0])
			}
			out.Coverage[j].Count += row.Count
			out.Coverage[j].Seeds += row.Seeds
		}
		if r.Determinism != nil {
			out.Determinism.Checked += r.Determinism.Checked
			out.Determinism.Nondeterministic = append(out.Determinism.Nondeterministic, r.Determinism.Nondeterministic...)
		}
	}
	var missing []string
	for i := 1; i <= n; i++ {
		if !seen[i] {
			missing = append(missing, fmt.Sprintf("%d/%d", i, n))
		}
	}
	if len(missing) > 0 {
		return sweepReport{}, usagef("merge: shards %s are missing; give every shard of the sweep", strings.Join(missing, ", "))
	}
	// Each shard lists its lowest seeds; the lowest of their union are the
	// lowest of the whole range.
	sort.Slice(out.FailingSeeds, func(i, j int) bool { return out.FailingSeeds[i].Seed < out.FailingSeeds[j].Seed })
	sort.Slice(out.Errors, func(i, j int) bool { return out.Errors[i].Seed < out.Errors[j].Seed })
	out.FailingSeeds = out.FailingSeeds[:min(len(out.FailingSeeds), maxListed)]
	out.Errors = out.Errors[:min(len(out.Errors), maxListed)]
	if out.Determinism != nil {
		slices.Sort(out.Determinism.Nondeterministic)
		out.Determinism.Nondeterministic = out.Determinism.Nondeterministic[:min(len(out.Determinism.Nondeterministic), maxListed)]
	}
	out.Uncovered = uncovered(out)
	return out, nil
}

// readBoundedFile reads a regular file of at most limit bytes.
func readBoundedFile(path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes; at most %d", path, st.Size(), limit)
	}
	return os.ReadFile(path)
}
