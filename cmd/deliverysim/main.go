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
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

const usageText = `usage: deliverysim <command> [flags]

commands:
  run    --seed N | --scenario FILE|NAME [--backend memory|postgres] [--dsn DSN] [--json]
         [--check-determinism] [--no-minimize] [--min-dir DIR]
         run one simulation and check every invariant; a failing run is reduced
         to a smaller scenario file that fails the same way, and its path printed
  sweep  --seeds A-B [--parallel K] [--backend ...] [--json] [--check-determinism]
         run a range of seeds and summarise
  trace  --seed N | --scenario FILE|NAME [--out FILE] [--backend ...]
         write the full trace of one simulation
  scenarios [--json] [--no-run]
         list the scenario library (one per failure story of the seeds) and
         check each on the reference engine
  mutants [--json] [--seeds N] [--parallel K] [--only LIST]
         for every known-bug variant: caught by its scenarios? by a blind
         random sweep? first failing seed, seeds and seconds to it

common flags: --bugs LIST (known-bug engine variants, comma-separated),
  --faults PLAN (kind=rate[/max],... instead of the seed's random plan),
  --verbose (debug diagnostics on stderr)
Postgres: --dsn or DELIVERYSIM_PG_DSN; each run uses a fresh schema, dropped afterwards.
exit codes: 0 clean, 1 invariant violated, 2 bad invocation or backend unavailable`

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
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{ctx: ctx, stdout: stdout, stderr: stderr, getenv: getenv,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
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
	case "bench":
		code, err = a.cmdBench(args[1:])
	case "help", "-h", "--help", "-help":
		fmt.Fprintln(stdout, usageText)
		return 0
	default:
		err = usagef("unknown command %q; use run, sweep, trace, scenarios, mutants or bench (deliverysim help lists them)", args[0])
	}
	if err != nil {
		if errors.Is(err, errHelp) {
			return 0
		}
		// Usage mistakes, unreachable backends and anything else that kept
		// the run from happening: one line, exit 2.
		fmt.Fprintln(stderr, "deliverysim: "+err.Error())
		return 2
	}
	return code
}
