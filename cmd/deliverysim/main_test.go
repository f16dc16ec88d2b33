package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/internal/pgtest"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/sim"
)

// cli runs the command in-process with the given environment.
func cli(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	minDir := t.TempDir() // failing runs write their minimized scenario here, not in $TMPDIR
	code = run(context.Background(), args, &out, &errb, func(k string) string {
		if v, ok := env[k]; ok || k != "DELIVERYSIM_MIN_DIR" {
			return v
		}
		return minDir
	})
	return code, out.String(), errb.String()
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, s)
	}
	return v
}

var hexHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestRunJSONShape(t *testing.T) {
	code, out, _ := cli(t, nil, "run", "--seed", "1", "--json")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v", err)
	}
	for _, k := range []string{"seed", "backend", "trace_hash", "violations", "faults", "counters", "invariants"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	rep := decode[runReport](t, out)
	if rep.Seed != 1 || rep.Backend != "memory" || !hexHash.MatchString(rep.TraceHash) {
		t.Fatalf("seed %d backend %q hash %q", rep.Seed, rep.Backend, rep.TraceHash)
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw["violations"]), []byte("[")) {
		t.Fatalf("violations is %s, want an array", raw["violations"])
	}
	if (code == 0) != (len(rep.Violations) == 0) {
		t.Fatalf("exit %d with %d violations", code, len(rep.Violations))
	}
	for _, k := range faults.All() {
		if _, ok := rep.Faults[string(k)]; !ok {
			t.Errorf("faults lacks %s", k)
		}
	}
	for _, inv := range oracle.Invariants() {
		if v := rep.Invariants[inv]; v != "pass" && v != "fail" {
			t.Errorf("invariant %s verdict %q", inv, v)
		}
	}
	if rep.Counters.Events == 0 || rep.Counters.Obligations == 0 {
		t.Fatalf("empty counters: %+v", rep.Counters)
	}
}

func TestRunIsDeterministicAndTraceMatchesHash(t *testing.T) {
	_, a, _ := cli(t, nil, "run", "--seed", "4", "--json")
	_, b, _ := cli(t, nil, "run", "--seed", "4", "--json", "--check-determinism")
	ra, rb := decode[runReport](t, a), decode[runReport](t, b)
	if ra.TraceHash != rb.TraceHash {
		t.Fatalf("same seed, different hashes: %s %s", ra.TraceHash, rb.TraceHash)
	}
	if rb.Deterministic == nil || !*rb.Deterministic || rb.Invariants[invDeterminism] != "pass" {
		t.Fatalf("--check-determinism did not confirm: %+v", rb.Deterministic)
	}
	_, c, _ := cli(t, nil, "run", "--seed", "5", "--json")
	if decode[runReport](t, c).TraceHash == ra.TraceHash {
		t.Fatal("seeds 4 and 5 have the same trace hash")
	}

	file := filepath.Join(t.TempDir(), "trace.txt")
	if code, _, errS := cli(t, nil, "trace", "--seed", "4", "--out", file); code != 0 {
		t.Fatalf("trace exit %d: %s", code, errS)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != ra.TraceHash {
		t.Fatal("the trace file does not hash to run's trace_hash")
	}
	if code, out, _ := cli(t, nil, "trace", "--seed", "4"); code != 0 || out != string(data) {
		t.Fatal("trace to stdout differs from trace --out")
	}
}

// A violation exits 1 and prints one command; running that command replays
// the same trace and fails the same way.
func TestViolationExitsOneWithReproduceCommand(t *testing.T) {
	for seed := 1; seed <= 10; seed++ {
		s := strconv.Itoa(seed)
		code, out, errS := cli(t, nil, "run", "--seed", s, "--bugs", "no-receiver-dedup", "--json")
		if code != 1 {
			continue
		}
		rep := decode[runReport](t, out)
		if len(rep.Violations) == 0 || rep.Invariants[oracle.InvIdempotentReplay] != "fail" {
			t.Fatalf("exit 1 without an idempotent-replay violation: %+v", rep.Invariants)
		}
		want := selfCommand() + " run --seed " + s + " --bugs no-receiver-dedup"
		if rep.Reproduce != want || !strings.Contains(errS, "reproduce: "+want) {
			t.Fatalf("reproduce = %q, stderr %q; want %q", rep.Reproduce, errS, want)
		}
		args := strings.Fields(strings.TrimPrefix(want, selfCommand()+" "))
		code2, out2, _ := cli(t, nil, append(args, "--json")...)
		if code2 != 1 || decode[runReport](t, out2).TraceHash != rep.TraceHash {
			t.Fatalf("the reproduce command gave exit %d and a different trace", code2)
		}
		// Human output ends with the verdict and the command.
		_, human, _ := cli(t, nil, args...)
		if !strings.Contains(human, "verdict: FAIL") || !strings.Contains(human, "reproduce: "+want) {
			t.Fatalf("human output lacks verdict or command:\n%s", human)
		}
		return
	}
	t.Fatal("no seed in 1..10 violated an invariant with the receiver's dedup cache off")
}

func TestUsageErrorsAreOneLineExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, "unknown command"},
		{[]string{"run"}, "--seed is required"},
		{[]string{"run", "--seed", "x"}, "not a non-negative integer"},
		{[]string{"run", "--seed", "-3"}, "not a non-negative integer"},
		{[]string{"run", "--seed", "1", "--backend", "mongo"}, "memory or postgres"},
		{[]string{"run", "--seed", "1", "--nope"}, "flag provided but not defined"},
		{[]string{"run", "--seed", "1", "extra"}, "unexpected argument"},
		{[]string{"run", "--seed", "1", "--bugs", "nope"}, "unknown bug"},
		{[]string{"run", "--seed", "1", "--faults", "crash=7"}, "outside [0, 1]"},
		{[]string{"sweep"}, "--seeds is required"},
		{[]string{"sweep", "--seeds", "9-3"}, "range is empty"},
		{[]string{"sweep", "--seeds", "a-b"}, "not a non-negative integer"},
		{[]string{"sweep", "--seeds", "1-3", "--parallel", "0"}, "outside [1, 1024]"},
		{[]string{"trace"}, "--seed is required"},
		{[]string{"bench", "replay", "--handoff", "sideways"}, "use direct or queued"},
		{[]string{"bench", "peer", "--jobs", "2"}, "--jobs must be at least 4"},
		{[]string{"bench", "sideways"}, "bench peer"},
		// Engine settings are refused before anything starts, naming the flag.
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--jitter", "1.5"}, "--jitter: "},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--registry", "http://127.0.0.1:1", "--max-attempts", "0"}, "--max-attempts: "},
		{[]string{"chaos", "--jitter", "2"}, "--jitter: "},
		{[]string{"chaos", "--lease", "400ms"}, "--lease: "},
		{[]string{"chaos", "--ack-delay", "10s"}, "--ack-delay: "},
		{[]string{"chaos", "--duration", "30s", "--db-outage", "25s"}, "--db-outage 25s"},
	} {
		code, out, errS := cli(t, nil, tc.args...)
		if code != 2 || out != "" {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing", tc.args, code, out)
		}
		if strings.Count(errS, "\n") != 1 || !strings.Contains(errS, tc.want) {
			t.Errorf("%v: stderr %q; want one line containing %q", tc.args, errS, tc.want)
		}
	}
	if code, _, errS := cli(t, nil); code != 2 || !strings.Contains(errS, "usage:") {
		t.Errorf("no arguments: exit %d, %q", code, errS)
	}
	if code, out, _ := cli(t, nil, "help"); code != 0 || !strings.Contains(out, "sweep") {
		t.Errorf("help: exit %d", code)
	}
}

func TestUnreachablePostgresIsOneLine(t *testing.T) {
	dsn := "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=3"
	for _, args := range [][]string{
		{"run", "--seed", "1", "--backend", "postgres", "--dsn", dsn},
		{"sweep", "--seeds", "1-2", "--backend", "postgres"},
	} {
		code, out, errS := cli(t, map[string]string{"DELIVERYSIM_PG_DSN": dsn}, args...)
		if code != 2 || out != "" || strings.Count(errS, "\n") != 1 {
			t.Fatalf("%v: exit %d stdout %q stderr %q", args, code, out, errS)
		}
		if !strings.Contains(errS, "DELIVERYSIM_PG_DSN") || !strings.Contains(errS, "--dsn") {
			t.Fatalf("%v: %q does not name --dsn and DELIVERYSIM_PG_DSN", args, errS)
		}
	}
}

// bench replay prints a progress line first; the error after it is the
// store's own one-line description of the unreachable server.
func TestBenchUnreachablePostgresIsOneLine(t *testing.T) {
	dsn := "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=3"
	code, out, errS := cli(t, nil, "bench", "replay", "--backend", "postgres", "--dsn", dsn, "--events", "10")
	lines := strings.Split(strings.TrimSpace(errS), "\n")
	last := lines[len(lines)-1]
	if code != 2 || out != "" || !strings.HasPrefix(last, "deliverysim: postgres unreachable at 127.0.0.1:1") ||
		!strings.Contains(last, "DELIVERYSIM_PG_DSN") || !strings.Contains(last, "--dsn") {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errS)
	}
}

// Without --dsn or DELIVERYSIM_PG_DSN the local server is used, and said
// so; whether or not it is up, the output names it.
func TestPostgresDefaultsToTheLocalServer(t *testing.T) {
	_, _, errS := cli(t, nil, "bench", "replay", "--backend", "postgres", "--events", "10", "--streams", "1")
	if !strings.Contains(errS, "using the local server postgres://postgres@127.0.0.1:5432/") {
		t.Fatalf("stderr %q does not say which server it used", errS)
	}
}

func TestSweepSummaryIndependentOfParallelism(t *testing.T) {
	code1, one, _ := cli(t, nil, "sweep", "--seeds", "1-8", "--json", "--parallel", "1")
	code4, four, progress := cli(t, nil, "sweep", "--seeds", "1-8", "--json", "--parallel", "4")
	if one != four || code1 != code4 {
		t.Fatalf("parallel 1 and 4 disagree (exit %d vs %d)", code1, code4)
	}
	rep := decode[sweepReport](t, one)
	if rep.SeedsRun != 8 || rep.FailingSeeds == nil || len(rep.Errors) != 0 {
		t.Fatalf("seeds_run %d, failing %v, errors %v", rep.SeedsRun, rep.FailingSeeds, rep.Errors)
	}
	if (code1 == 0) != (rep.ViolationsTotal == 0) {
		t.Fatalf("exit %d with %d violations", code1, rep.ViolationsTotal)
	}
	if len(rep.Faults) != len(faults.All()) || rep.Counters.Events == 0 {
		t.Fatalf("faults %v counters %+v", rep.Faults, rep.Counters)
	}
	if !strings.Contains(progress, "sweep progress") || !strings.Contains(progress, "done=8") {
		t.Fatalf("no progress on stderr: %q", progress)
	}
}

func TestSweepListsFailingSeeds(t *testing.T) {
	code, out, _ := cli(t, nil, "sweep", "--seeds", "1-4", "--bugs", "no-receiver-dedup", "--json", "--check-determinism")
	rep := decode[sweepReport](t, out)
	if code != 1 || len(rep.FailingSeeds) == 0 || rep.ViolationsTotal == 0 {
		t.Fatalf("exit %d, %d failing seeds", code, len(rep.FailingSeeds))
	}
	if rep.Determinism == nil || rep.Determinism.Checked != 4 || len(rep.Determinism.Nondeterministic) != 0 {
		t.Fatalf("determinism = %+v", rep.Determinism)
	}
	for _, f := range rep.FailingSeeds {
		if !strings.Contains(f.Reproduce, "--seed "+strconv.FormatUint(f.Seed, 10)+" --bugs no-receiver-dedup") || len(f.Invariants) == 0 {
			t.Fatalf("failing seed %+v", f)
		}
	}
	if rep.Invariants[oracle.InvIdempotentReplay] == 0 {
		t.Fatalf("invariant table %v", rep.Invariants)
	}
	_, human, _ := cli(t, nil, "sweep", "--seeds", "1-4", "--bugs", "no-receiver-dedup")
	if !strings.Contains(human, "failing seeds (") || !strings.Contains(human, "reproduce: "+selfCommand()+" run --seed") {
		t.Fatalf("human sweep output:\n%s", human)
	}
}

// The same seed must give the same trace on Postgres as in memory, and the
// run's schema must be gone afterwards.
func TestPostgresBackendMatchesMemory(t *testing.T) {
	dsn := pgtest.DSN(t)
	_, mem, _ := cli(t, nil, "run", "--seed", "3", "--json")
	code, pg, errS := cli(t, nil, "run", "--seed", "3", "--json", "--backend", "postgres", "--dsn", dsn)
	if code == 2 {
		t.Fatalf("postgres run failed: %s", errS)
	}
	rm, rp := decode[runReport](t, mem), decode[runReport](t, pg)
	if rp.Backend != "postgres" || rp.TraceHash != rm.TraceHash {
		t.Fatalf("postgres trace %s differs from memory %s", rp.TraceHash, rm.TraceHash)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang detector only
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	pattern := "dsim\\_3\\_" + strconv.Itoa(os.Getpid()) + "\\_%"
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", pattern).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d run schemas left behind", left)
	}
}

// The sweep reports the coverage catalogue; --require-coverage fails,
// naming them, when some situations were not reached (two seeds cannot
// reach them all), and does not change the exit code otherwise.
func TestSweepRequireCoverage(t *testing.T) {
	code, out, _ := cli(t, nil, "sweep", "--seeds", "1-2", "--json")
	rep := decode[sweepReport](t, out)
	if code != 0 || len(rep.Coverage) != len(sim.Catalogue()) || len(rep.Uncovered) == 0 {
		t.Fatalf("exit %d, %d coverage rows, uncovered %v", code, len(rep.Coverage), rep.Uncovered)
	}
	for _, row := range rep.Coverage {
		if row.Doc == "" || (row.Count == 0) != slices.Contains(rep.Uncovered, row.Name) {
			t.Fatalf("row %+v disagrees with uncovered %v", row, rep.Uncovered)
		}
	}
	code, _, stderr := cli(t, nil, "sweep", "--seeds", "1-2", "--require-coverage")
	if code != 1 || !strings.Contains(stderr, "--require-coverage") || !strings.Contains(stderr, rep.Uncovered[0]) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
