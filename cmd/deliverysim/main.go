// Command deliverysim runs the deterministic delivery simulator: one seed or
// scenario (run), a range of seeds (sweep), the full trace of one (trace),
// the scenario library (scenarios), and the known-bug variants (mutants).
//
// Exit codes: 0 every checked invariant held; 1 some invariant failed (or a
// determinism check found two different traces); 2 the run could not happen
// as asked (bad flags, bad seed range, unreachable backend).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGINT and SIGTERM cancel the invocation's context: a sweep stops
	// starting seeds, prints what it has (marked interrupted) and its
	// Postgres schemas are dropped on the way out; the exit status is 130.
	// A second signal kills the process at once (the default action is
	// restored after the first).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	// After a signal every command exits 130 (with its partial --json)
	// except serve, which drains and exits 0, as a service should.
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

const usageText = `usage: deliverysim <command> [flags]

commands:
  run    --seed N | --scenario FILE|NAME [--backend memory|postgres] [--dsn DSN] [--json]
         [--check-determinism] [--no-minimize] [--min-dir DIR] [--html FILE]
         run one simulation and check every invariant; a failing run is reduced
         to a smaller scenario file that fails the same way, and its path printed
         (under --min-dir, $DELIVERYSIM_MIN_DIR or $TMPDIR/deliverysim-min, in a
         directory of its own per run); --html writes a self-contained HTML report
         (timeline, violations; its directory must exist, checked before the run)
  sweep  --seeds A-B [--parallel K] [--backend ...] [--dsn DSN] [--json] [--check-determinism]
         [--shard I/N] [--junit FILE] [--artifacts DIR] [--require-coverage] [--resources]
         run a range of seeds (at most 100000000) and summarise, in memory that
         does not grow with the range; --shard runs the I-th of N parts (N alone:
         I from $JOB_COMPLETION_INDEX + 1); --artifacts writes trace, scenario,
         minimized scenario and HTML report of the lowest 10 failing seeds under
         DIR/seed-N/;
         --require-coverage exits 1 naming every catalogue situation no seed reached
  merge  [--json] FILES...
         combine the JSON of every shard of one sweep into the sweep's report
         (same exit status rules as sweep)
  triage [--json] [--junit FILE] [--fail-on LIST] OLD.json NEW.json [NEW.json...]
         compare the findings (an invariant on a seed, or a failed check) of
         the --json reports of sweep/merge, scenarios, certify or chaos: new,
         ongoing, resolved, regressed, flaky. OLD is the baseline (a report, or
         an earlier triage --json, which remembers what was resolved, so a
         return is "regressed"); the NEWs are the new build's runs (shards of
         one sweep are merged; repeats that disagree on a finding make it
         flaky). --junit and ::error annotations list new and regressed only;
         exit 1 when a --fail-on class (default new,regressed) has findings;
         reports of different kinds or settings (backend, fault plan) are refused
  cause  --seed N | --scenario FILE|NAME [--bugs LIST] [--faults PLAN] [--trials N] [--parallel K]
         [--keep-bugs] [--json] [--html FILE]
         the decisive step of a failing run (in memory): the earliest step after which every
         continuation fails, each continuation the same run to that step and its
         randomness and faults re-drawn after it (--trials of them per probed step,
         bisected between step 0 and the first violation); prints the step, its
         event and fault, and the failure probability before and after it with the
         runs behind it; with --bugs the continuations run the reference engine
         after the branch (--keep-bugs: the variant) and the step the variant first
         acted is printed; --html marks the decisive step on the run's timeline
  trace  --seed N | --scenario FILE|NAME [--out FILE] [--backend ...] [--dsn DSN]
         write the full trace of one simulation
  scenarios [--json] [--no-run] [--junit FILE]
         list the scenario library (one per failure story of the seeds) and
         check each on the reference engine
  mutants [--json] [--junit FILE] [--seeds N] [--first-seed N] [--parallel K] [--only LIST]
         for every known-bug variant: caught by its scenarios? by a blind
         random sweep? first failing seed, seeds and seconds to it
  mutate [--pkg LIST] [--seeds N] [--parallel K] [--json] [--junit FILE] [--list]
         [--only IDS] [--survivors FILE]
         mutation analysis: mutate the engine, receiver and store code, run the
         blind sweep, the scenarios and (for the store) the conformance suite
         against each mutant, and print the kill matrix and kill rate
  certify [--backend postgres|memory] [--dsn DSN] [--json] [--junit FILE] [--checks N]
         [--only LIST] [--seed N] [--rapid-seed N] [--artifacts DIR]
         run the store conformance suite (contract, state machine,
         linearizability) against impl/pgstore on a PostgreSQL server, once
         per session time zone (UTC, America/New_York), or against memstore;
         a failing check's files (a non-linearizable history as HTML) go under
         --artifacts, else $DELIVERYSIM_ARTIFACTS, else a folder of the run's own
         under $TMPDIR/deliverysim-certify (the report names it)
  gc     [--dsn DSN] [--older-than 1h] [--prefix dsim_] [--legacy] [--dry-run] [--json]
         drop the project's schemas (dsim_*) that interrupted runs left behind;
         --legacy also its old-style ones (t_*, bench_*, dsim_<seed>_* of the exact
         shapes the project used before), once --older-than has passed since the
         first gc that saw them (recorded in the schema's comment)
  bench  replay [--backend memory|postgres] [--dsn DSN] [--handoff direct|queued]
         [--events N] [--streams S] [--bots B] [--batch N] [--separate-writes] [--cpuprofile FILE]
         [--json]
         replay stored cursors through the engine (events x bots <= 20000000)
  bench  peer [--dsn DSN] [--jobs N] [--rounds R] [--river-workers W] [--json]
         the queued Postgres replay beside River
  serve  --upstream URL --registry URL [--backend memory|postgres] [--listen ADDR] ...
         the reference engine as a real service (runtime/PROTOCOL.md);
         serve -h lists every flag (each also DELIVERYSIM_<FLAG> in the environment)
  chaos  [--duration 30s] [--kills N] [--db-cuts N] [--seed N] [--bugs LIST] [--engine-cmd CMD] [--json]
         [--bots N] [--bot-faults N] [--db-outage DUR] [--rate N] [--settle 1m] [--handoff queued|direct] [--dsn DSN]
         [--faults KIND,...] [--kill-window DUR] [--smoke] [--replay REPORT.json] [--plant LIST] [--breaker declared|none]
         [--snapshots declared|none]
         real processes on loopback: SIGKILLs, database cuts and broken bots
         against an engine (deliverysim serve by default), judged by the checker;
         the engine's settings, with serve's flag names, are the checker's bounds
         (the reference runs with them; --engine-cmd declares its own): --max-attempts,
         --initial-backoff, --backoff-multiplier, --max-backoff, --jitter, --webhook-timeout,
         --lease, --store-retry, --breaker-failures, --breaker-open-for, --breaker-close-after,
         --retention-ttl, --retention-max, --cleanup-interval, --clock-skew-budget,
         --max-in-flight-per-bot, --timestamp-lookback, --ack-delay; --plant runs a
         planted variant of the reference that a rule judged with them must catch
  pgwhich [--say TEXT]
         which PostgreSQL the CLI would use ($DELIVERYSIM_PG_DSN, else the local
         default if it answers): the DSN on stdout, which and why on stderr
         (make test runs it so the tests use the same server)
  help   [json]
         this text; help json describes every JSON output (cmd/deliverysim/json.md)

common flags (run, sweep, trace): --bugs LIST (known-bug engine variants, comma-separated),
  --faults PLAN (kind=rate[/max],... instead of the seed's random plan; rate in [0, 1],
  max in [0, 24h], clock-drift max <= 30m per hour), --verbose (debug diagnostics on stderr)
Postgres: --dsn or DELIVERYSIM_PG_DSN; each run uses a fresh schema, dropped afterwards.
CI: --junit FILE writes JUnit XML; with GITHUB_ACTIONS=true failures are also
  printed as ::error annotations (on stderr); every --json carries schema_version.
signals: SIGINT/SIGTERM stop any command within seconds: exit 130, what --json had so far
  ("interrupted": true), its Postgres schemas and temporary files removed; serve drains
  and exits 0. A second signal kills at once.
exit codes: 0 clean, 1 invariant violated, 2 bad invocation or backend unavailable, 130 interrupted`

// usageError is a mistake in the invocation: reported on one line, exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// envError is an environment problem (a backend that cannot be reached):
// one line, exit 2.
type envError struct{ err error }

func (e *envError) Error() string { return e.err.Error() }
func (e *envError) Unwrap() error { return e.err }

// app carries one invocation's streams and environment, so tests can run
// the command in-process.
type app struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	log    *slog.Logger
	health pgHealth // the Postgres server's, once a command uses it
	atExit []func() // run when the command returns
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{ctx: ctx, stdout: stdout, stderr: stderr, getenv: getenv,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	defer func() {
		for _, f := range a.atExit {
			f()
		}
	}()
	if len(args) == 0 {
		fmt.Fprintln(stderr, usageText)
		return 2
	}
	var code int
	var err error
	switch args[0] {
	case "run":
		code, err = a.cmdRun(args[1:])
	case "sweep":
		code, err = a.cmdSweep(args[1:])
	case "trace":
		code, err = a.cmdTrace(args[1:])
	case "scenarios":
		code, err = a.cmdScenarios(args[1:])
	case "mutants":
		code, err = a.cmdMutants(args[1:])
	case "mutate":
		code, err = a.cmdMutate(args[1:])
	case "bench":
		code, err = a.cmdBench(args[1:])
	case "serve":
		code, err = a.cmdServe(args[1:])
	case "chaos":
		code, err = a.cmdChaos(args[1:])
	case "merge":
		code, err = a.cmdMerge(args[1:])
	case "triage":
		code, err = a.cmdTriage(args[1:])
	case "cause":
		code, err = a.cmdCause(args[1:])
	case "gc":
		code, err = a.cmdGC(args[1:])
	case "certify":
		code, err = a.cmdCertify(args[1:])
	case "pgwhich":
		code, err = a.cmdPgWhich(args[1:])
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && args[1] == "json" {
			fmt.Fprint(stdout, jsonDoc)
			return 0
		}
		fmt.Fprintln(stdout, usageText)
		return 0
	default:
		err = usagef("unknown command %q; use run, sweep, merge, triage, cause, trace, scenarios, mutants, mutate, certify, gc, bench, serve or chaos (deliverysim help lists them)", args[0])
	}
	if err != nil {
		if errors.Is(err, errHelp) {
			return 0
		}
		// A command that failed because a signal cut it short was
		// interrupted, not misused: exit 130 as the sweep does. serve
		// drains and exits 0 by design; chaos decides for itself.
		if a.interrupted() && args[0] != "serve" && args[0] != "chaos" {
			fmt.Fprintln(stderr, "deliverysim: interrupted: "+err.Error())
			return exitInterrupted
		}
		// Usage mistakes, unreachable backends and anything else that kept
		// the run from happening: one line, exit 2.
		fmt.Fprintln(stderr, "deliverysim: "+err.Error())
		return 2
	}
	return code
}
