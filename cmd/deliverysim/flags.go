package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strconv"
	"strings"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/scenarios"
)

var errHelp = errors.New("help shown")

// common are the flags every subcommand shares.
type common struct {
	backend   string
	dsn       string
	json      bool
	determin  bool
	bugsFlag  string
	faultsArg string
	verbose   bool

	bugs     engine.Bugs
	bugNames []string
	plan     *faults.Plan
}

func (c *common) register(fs *flag.FlagSet, withReport bool) {
	fs.StringVar(&c.backend, "backend", "memory", "store backend: memory or postgres")
	fs.StringVar(&c.dsn, "dsn", "", "Postgres DSN (default $DELIVERYSIM_PG_DSN)")
	if withReport {
		fs.BoolVar(&c.json, "json", false, "print a JSON report on stdout")
		fs.BoolVar(&c.determin, "check-determinism", false, "run each seed twice and require identical traces")
	}
	fs.StringVar(&c.bugsFlag, "bugs", "", "known-bug engine variants, comma-separated: "+strings.Join(bugNames(), ", "))
	fs.StringVar(&c.faultsArg, "faults", "", "fault plan kind=rate[/max],... (default: drawn from the seed); \"none\" disables faults")
	fs.BoolVar(&c.verbose, "verbose", false, "debug diagnostics on stderr")
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints its usage only when asked (-h).
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	_ = stderr
	return fs
}

// parse parses args and turns flag errors into one-line usage errors. A
// flag given twice is one of them: the flag package keeps the last value
// without a word, so `run --seed 1 --seed 2` ran seed 2 alone, and a
// reader of the command line cannot tell which one counts.
func (a *app) parse(fs *flag.FlagSet, args []string) error {
	return a.parseOver(fs, args)
}

// parseOver is parse for a command line laid over another one (chaos
// --replay: the report's flags, then the user's): a later layer may
// set what an earlier one did, but within one layer each flag appears
// once.
func (a *app) parseOver(fs *flag.FlagSet, layers ...[]string) error {
	for _, args := range layers {
		if err := a.parseOnce(fs, args); err != nil {
			return err
		}
	}
	return nil
}

// countedValue counts the times its flag is set.
type countedValue struct {
	flag.Value
	n *int
}

func (c countedValue) Set(s string) error {
	*c.n++
	return c.Value.Set(s)
}

// IsBoolFlag keeps a boolean flag usable without a value.
func (c countedValue) IsBoolFlag() bool {
	b, ok := c.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (a *app) parseOnce(fs *flag.FlagSet, args []string) error {
	if err := a.parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q (flags start with --)", fs.Name(), fs.Arg(0))
	}
	return nil
}

// parseFlags parses the flags of args (the operands after them stay in
// fs.Args), refusing a flag given twice.
func (a *app) parseFlags(fs *flag.FlagSet, args []string) error {
	twice := countSets(fs)
	err := fs.Parse(args)
	names := twice()
	if err != nil {
		return a.flagError(fs, err)
	}
	return givenTwice(fs, names)
}

// countSets makes every flag of fs count the times it is set, until the
// function it returns is called: that puts the flags back as they were
// and names those set more than once.
func countSets(fs *flag.FlagSet) func() []string {
	counts := map[string]*int{}
	fs.VisitAll(func(f *flag.Flag) {
		n := new(int)
		counts[f.Name] = n
		f.Value = countedValue{Value: f.Value, n: n}
	})
	return func() []string {
		var twice []string
		fs.VisitAll(func(f *flag.Flag) {
			if c, ok := f.Value.(countedValue); ok {
				f.Value = c.Value
			}
			if *counts[f.Name] > 1 {
				twice = append(twice, "--"+f.Name)
			}
		})
		return twice
	}
}

func givenTwice(fs *flag.FlagSet, names []string) error {
	if len(names) == 0 {
		return nil
	}
	return usagef("%s: %s given more than once; give each flag once", fs.Name(), strings.Join(names, ", "))
}

// flagError is the one-line usage error of a failed parse (or the usage,
// for -h).
func (a *app) flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(a.stdout)
		fmt.Fprintf(a.stdout, "usage of deliverysim %s:\n", fs.Name())
		fs.PrintDefaults()
		return errHelp
	}
	return usagef("%s: %v (deliverysim %s -h lists the flags)", fs.Name(), err, fs.Name())
}

// parseWithArgs is parse for a command that takes operands (merge
// FILES..., triage OLD NEW...). Flags may also follow the operands
// (triage a.json b.json --json): the flag package stops at the first
// operand, so parsing resumes after each one ("--" ends the flags). A
// flag is given once over the whole command line.
func (a *app) parseWithArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	twice := countSets(fs)
	operands := []string{}
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			twice()
			return nil, a.flagError(fs, err)
		}
		after := fs.Args()
		consumed := rest[:len(rest)-len(after)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			operands = append(operands, after...)
			break
		}
		if len(after) == 0 {
			break
		}
		operands = append(operands, after[0])
		rest = after[1:]
	}
	if err := givenTwice(fs, twice()); err != nil {
		return nil, err
	}
	return operands, nil
}

// finish validates the common flags after parsing.
// defaultDSN is where --backend postgres looks when no DSN is given.
const defaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func (c *common) finish(a *app) error {
	if c.verbose {
		a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	switch c.backend {
	case "memory":
	case "postgres", "pg":
		c.backend = "postgres"
		if c.dsn == "" {
			c.dsn = a.getenv("DELIVERYSIM_PG_DSN")
		}
		if c.dsn == "" {
			// The server a fresh machine of this project runs; saying which
			// one is used keeps the default from being a surprise.
			c.dsn = defaultDSN
			fmt.Fprintf(a.stderr, "deliverysim: no --dsn and no DELIVERYSIM_PG_DSN; using the local server %s\n", defaultDSN)
		}
	default:
		return usagef("--backend %q is not a backend; use memory or postgres", c.backend)
	}
	bugs, names, err := parseBugs(c.bugsFlag)
	if err != nil {
		return err
	}
	c.bugs, c.bugNames = bugs, names
	if c.faultsArg != "" {
		p, err := faults.ParsePlan(c.faultsArg)
		if err != nil {
			return usagef("--faults: %v", err)
		}
		c.plan = &p
	}
	return nil
}

// reproduce is the one command that replays seed exactly as this
// invocation ran it.
func (c *common) reproduce(seed uint64) string {
	s := selfCommand() + " run --seed " + strconv.FormatUint(seed, 10)
	if len(c.bugNames) > 0 {
		s += " --bugs " + strings.Join(c.bugNames, ",")
	}
	if c.plan != nil {
		s += " --faults " + strconv.Quote(c.plan.String())
	}
	return c.withBackend(s)
}

// withBackend adds the backend to a reproduce command. A Postgres DSN is
// passed in DELIVERYSIM_PG_DSN with its password removed (pgx then reads
// it from $PGPASSWORD or ~/.pgpass), so a CI log never shows it.
func (c *common) withBackend(cmd string) string {
	if c.backend != "postgres" {
		return cmd
	}
	s := "DELIVERYSIM_PG_DSN=" + shellQuote(redactDSN(c.dsn)) + " " + cmd + " --backend postgres"
	if hasPassword(c.dsn) {
		s += "  # with PGPASSWORD set (the password is not printed)"
	}
	return s
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func bugNames() []string { return scenarios.VariantNames() }

func parseBugs(s string) (engine.Bugs, []string, error) {
	b, names, err := scenarios.ParseBugs(strings.Split(s, ","))
	if err != nil {
		return b, nil, usagef("--bugs: %v", err)
	}
	return b, names, nil
}

// parseSeed reads one seed.
func parseSeed(flagName, s string) (uint64, error) {
	if s == "" {
		return 0, usagef("%s is required (a non-negative integer, e.g. %s 42)", flagName, flagName)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, usagef("%s %q is not a non-negative integer", flagName, s)
	}
	return v, nil
}

// maxSweepSeeds is the longest sweep: a sweep's memory does not grow with
// its length, but at a few milliseconds a seed a hundred million seeds is
// days of work, which belongs in shards.
const maxSweepSeeds = 100_000_000

// parseSeedRange reads "A-B" (inclusive) or a single seed "A".
func parseSeedRange(s string) (lo, hi uint64, err error) {
	if s == "" {
		return 0, 0, usagef("--seeds is required, as a range like 1-500")
	}
	a, b, isRange := strings.Cut(s, "-")
	if lo, err = strconv.ParseUint(strings.TrimSpace(a), 10, 64); err != nil {
		return 0, 0, usagef("--seeds %q: %q is not a non-negative integer; write a range like 1-500", s, a)
	}
	hi = lo
	if isRange {
		if hi, err = strconv.ParseUint(strings.TrimSpace(b), 10, 64); err != nil {
			return 0, 0, usagef("--seeds %q: %q is not a non-negative integer; write a range like 1-500", s, b)
		}
	}
	if hi < lo {
		return 0, 0, usagef("--seeds %q: the range is empty (%d > %d); write it low-high", s, lo, hi)
	}
	if hi-lo >= maxSweepSeeds {
		// hi-lo+1 may not fit in 64 bits (0-18446744073709551615).
		span := new(big.Int).Add(new(big.Int).SetUint64(hi-lo), big.NewInt(1))
		return 0, 0, usagef("--seeds %q spans %s seeds; one sweep runs at most %d (split the range, or run it as shards with --shard I/N)", s, span, uint64(maxSweepSeeds))
	}
	return lo, hi, nil
}
