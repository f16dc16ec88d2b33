package mutate

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// The last step: the mutated package's own Go unit tests. A mutant that
// the seeds, the scenarios and the suite all let through may still break
// what a unit test of its package pins down (a copy the engine must make
// of a batch, code that only rare seeds reach); it then counts as killed,
// by "unit-tests", and the report counts those kills apart
// (killed_unit_tests), so the harness's own share stays visible.
//
// The test binary is compiled once per package with the schemata overlay
// (go test -c), like the harness binary, and run for a mutant only when
// nothing before killed it. Only in-process tests count: a package whose
// tests link a database driver or the Postgres test helpers (whose
// verdicts depend on a shared server and on timing) gets no unit-test step
// at all. The binary runs with a fixed rapid seed and without rapid's fail
// files, in its own process group, which is killed on a hang and reaped
// when it ends; a failure counts only if a second run of the same binary
// fails too.

// UnitTestsBy is Outcome.By for a mutant that only the package's own unit
// tests kill.
const UnitTestsBy = "unit-tests"

// rapidSeed pins pgregory.net/rapid's seed (by default drawn from the
// clock), so a property test checks the same inputs on every mutant.
const rapidSeed = "1"

// unitBin is one package's test binary, built with the schemata overlay.
type unitBin struct {
	pkg   string
	path  string
	rapid bool // links pgregory.net/rapid: its seed is pinned, no fail files
	// From the unmutated run: a run with no test line for stall, or
	// longer than limit in all, is hung.
	stall, limit time.Duration
}

// outOfProcess says why a package's test binary does not run in-process
// only: the imports that reach a database server (or start one), by
// import path prefix.
func outOfProcess(modPath string, deps []string) string {
	bad := []string{"database/sql", "github.com/jackc/pgx", "github.com/testcontainers/",
		modPath + "/internal/pgtest", modPath + "/impl/pgstore"}
	for _, d := range deps {
		for _, b := range bad {
			if d == b || strings.HasPrefix(d, strings.TrimSuffix(b, "/")+"/") {
				return "its tests link " + d + " (a database server): not in-process"
			}
		}
	}
	return ""
}

// unitTests builds the test binary of every package in pkgs whose tests
// run in-process, and says why for each of the others.
func (b *builds) unitTests(ctx context.Context, pkgs []string) (skipped map[string]string, err error) {
	modPath, err := modulePath(b.root)
	if err != nil {
		return nil, err
	}
	b.unit = map[string]*unitBin{}
	skipped = map[string]string{}
	for _, p := range pkgs {
		rel := "./" + filepath.ToSlash(p)
		out, err := b.goOut(ctx, "list", "-f", "{{len .TestGoFiles}} {{len .XTestGoFiles}}", rel)
		if err != nil {
			return nil, err
		}
		if f := strings.Fields(out); len(f) == 2 && f[0] == "0" && f[1] == "0" {
			skipped[p] = "no test files"
			continue
		}
		out, err = b.goOut(ctx, "list", "-test", "-deps", "-f", "{{.ImportPath}}", rel)
		if err != nil {
			return nil, err
		}
		var deps []string
		rapid := false
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			d, _, _ := strings.Cut(l, " ") // "path [pkg.test]" for test variants
			deps = append(deps, d)
			rapid = rapid || d == "pgregory.net/rapid"
		}
		if why := outOfProcess(modPath, deps); why != "" {
			skipped[p] = why
			continue
		}
		u := &unitBin{pkg: p, rapid: rapid, path: filepath.Join(b.dir, strings.ReplaceAll(p, "/", "_")+".test")}
		// -vet=off: go test vets the package it builds, and a guarded
		// mutant is code vet rightly calls suspect ("x != a || x != b").
		if err := b.goCmd(ctx, "test", "-c", "-vet=off", "-overlay", b.overlay, "-o", u.path, rel); err != nil {
			return nil, err
		}
		b.unit[p] = u
	}
	return skipped, nil
}

// goOut runs a go command and returns its standard output.
func (b *builds) goOut(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	ownGroup(cmd)
	cmd.Dir = b.root
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, tail(errOut.String(), 10))
	}
	return out.String(), nil
}

var (
	runLine   = regexp.MustCompile(`(?m)^=== RUN\s+(\S+)`)
	testLine  = regexp.MustCompile(`(?m)^\s+(\S+_test\.go:\d+):`)
	panicLine = regexp.MustCompile(`(?m)^(panic|fatal error): .*$`)
	labelLine = regexp.MustCompile(`^\s*[A-Z][A-Za-z ]*: *\t`)
	traceLine = regexp.MustCompile(`^\s*(Error Trace|Test):`)
)

// unitRun is one run of a package's test binary.
type unitRun struct {
	hung   bool
	failed bool
	out    string
}

func (r *runner) runUnit(ctx context.Context, u *unitBin, k int, stall, limit time.Duration) (unitRun, error) {
	args := []string{"-test.count=1", "-test.v", "-test.failfast",
		// A backstop: the binary's own timeout, past the runner's.
		"-test.timeout=" + (limit + time.Minute).String()}
	if u.rapid {
		args = append(args, "-rapid.seed="+rapidSeed, "-rapid.nofailfile")
	}
	cmd := exec.Command(u.path, args...)
	cmd.Dir = filepath.Join(r.b.root, u.pkg) // as go test runs it: testdata is found
	var env []string
	for _, e := range r.env(k) {
		// In-process tests only; no test may find a server this way.
		if !strings.HasPrefix(e, "DELIVERYSIM_PG_DSN=") && !strings.HasPrefix(e, "TMPDIR=") {
			env = append(env, e)
		}
	}
	// A test's t.TempDir left by a killed run goes with the analysis'
	// folder.
	cmd.Env = append(env, "TMPDIR="+r.b.dir)
	inGroup(cmd)
	// Output pipes a leftover child may hold do not keep Wait waiting.
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	hung, err := r.watch(ctx, cmd, &out, stall, limit)
	reapGroup(cmd)
	if ctx.Err() != nil {
		return unitRun{}, ctx.Err()
	}
	return unitRun{hung: hung, failed: err != nil, out: out.String()}, nil
}

// unit runs the package's unit tests against mutant k (k < 0: none, the
// baseline).
func (r *runner) unit(ctx context.Context, u *unitBin, k int) Outcome {
	stall, limit := u.stall, u.limit
	if k < 0 {
		stall, limit = time.Hour, time.Hour
	}
	run, err := r.runUnit(ctx, u, k, stall, limit)
	if err != nil {
		return Outcome{Status: Survived}
	}
	if run.hung {
		o := Outcome{Status: KilledTimeout, By: UnitTestsBy,
			Detail: fmt.Sprintf("the unit tests of %s made no progress for %s (or took over %s)", u.pkg, stall, limit)}
		if ms := runLine.FindAllStringSubmatch(run.out, -1); len(ms) > 0 {
			o.Check = ms[len(ms)-1][1] // the test that was running
		}
		return o
	}
	if !run.failed {
		return Outcome{Status: Survived}
	}
	o := unitFailure(run.out)
	if k < 0 {
		return o
	}
	// Counted only if it fails again: the tests are deterministic, so a
	// second run that passes means a flaky test, not a kill.
	again, err := r.runUnit(ctx, u, k, stall, limit)
	if err != nil {
		return Outcome{Status: Survived}
	}
	if !again.failed && !again.hung {
		if r.opts.Progress != nil {
			fmt.Fprintf(r.opts.Progress, "mutate: warning: %s's unit tests failed once on mutant %d (%s) and passed when run again: flaky, not counted\n", u.pkg, k, o.Check)
		}
		return Outcome{Status: Survived, Detail: fmt.Sprintf("unit test %s failed once and passed on a second run (flaky): not counted", o.Check)}
	}
	return o
}

// unitFailure reads a failed run's output: the deepest failing test (or
// the one running when the binary died) and its first failure message, or
// the panic or fatal error.
func unitFailure(out string) Outcome {
	o := Outcome{Status: Killed, By: UnitTestsBy}
	var fails []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		fails = append(fails, m[1])
	}
	sort.SliceStable(fails, func(i, j int) bool { return len(fails[i]) > len(fails[j]) })
	if len(fails) > 0 {
		o.Check = fails[0]
	} else if ms := runLine.FindAllStringSubmatch(out, -1); len(ms) > 0 {
		o.Check = ms[len(ms)-1][1]
	}
	if m := panicLine.FindString(out); m != "" {
		o.Detail = oneLine(m)
		return o
	}
	// The failing test's own output: from its last RUN line on (other
	// tests log too, under -test.v).
	section := out
	if o.Check != "" {
		if locs := regexp.MustCompile(`(?m)^=== RUN\s+`+regexp.QuoteMeta(o.Check)+`$`).FindAllStringIndex(out, -1); len(locs) > 0 {
			section = out[locs[len(locs)-1][1]:]
		}
	}
	if testLine.MatchString(section) {
		o.Detail = oneLine(failureText(section))
	} else {
		o.Detail = oneLine(tail(section, 3))
	}
	return o
}

// failureText is the first failure message of a test's output: where
// (file_test.go:line) and what (t.Error's text, or testify's Error and
// Messages, without its trace and test name).
func failureText(out string) string {
	loc := testLine.FindStringSubmatchIndex(out)
	msg := out[loc[0]:]
	if i := strings.Index(msg, "\n--- "); i >= 0 {
		msg = msg[:i]
	}
	if i := strings.Index(msg, "\n=== "); i >= 0 {
		msg = msg[:i]
	}
	var keep []string
	skip := false
	for _, l := range strings.Split(msg, "\n") {
		// A testify label starts a field; its continuation lines have
		// none and belong to it.
		if labelLine.MatchString(l) {
			skip = traceLine.MatchString(l)
		}
		if !skip {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	return strings.Join(keep, " ")
}

// unitBaseline runs every package's unit tests unmutated: they must pass
// (or every mutant would look killed), and their time sets the bounds.
func (r *runner) unitBaseline(ctx context.Context) error {
	var pkgs []string
	for p := range r.b.unit {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		u := r.b.unit[p]
		t0 := time.Now()
		if o := r.unit(ctx, u, -1); o.Status != Survived {
			return fmt.Errorf("the unmutated %s fails its own unit tests (%s: %s); fix that before measuring mutants", p, o.Check, o.Detail)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		took := time.Since(t0)
		u.limit = max(60*time.Second, 8*took)
		u.stall = max(r.stall, 2*took)
	}
	return nil
}
