package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/deliverysim/deliverysim/internal/outdir"
)

// CLI is the command line of a certification: the flags `deliverysim
// certify` and Main share, so that both print the same report and exit
// with the same codes (0 certified, 1 not, 2 the command was wrong).
type CLI struct {
	JSON      bool
	JUnit     string
	Checks    int
	Only      string
	Seed      uint64
	RapidSeed uint64
	Artifacts string
}

// Register defines the flags on fs.
func (c *CLI) Register(fs *flag.FlagSet) {
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON on stdout")
	fs.StringVar(&c.JUnit, "junit", "", "also write a JUnit XML report (one test case per check) to this file")
	fs.IntVar(&c.Checks, "checks", 100, "random sequences the state machine tries (1 to 100000)")
	fs.StringVar(&c.Only, "only", "", "comma-separated groups or checks to run (Contract, StateMachine, Linearizability, Contract/AckDeletesWhoeverHoldsIt, ...)")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the concurrent clients' calls and delays (0: draw one; the report prints it)")
	fs.Uint64Var(&c.RapidSeed, "rapid-seed", 0, "replay one state-machine failure: the --rapid-seed its message printed")
	fs.StringVar(&c.Artifacts, "artifacts", "", "where a failing check writes its files (a non-linearizable history as HTML; the failure names each file) "+
		"(default $DELIVERYSIM_ARTIFACTS, else a folder of its own under the system temp folder: deliverysim-certify/<UTC time>-<random>)")
}

// Options turns the flags into Check options, refusing values that would
// run something other than what was asked (a typo in --only selects
// nothing; an out-of-range --checks).
func (c *CLI) Options() ([]Option, error) {
	if c.Checks < 1 || c.Checks > 100000 {
		return nil, fmt.Errorf("--checks %d is outside [1, 100000]", c.Checks)
	}
	// Failures name this command line's flags (--rapid-seed, --seed) in
	// their replay hints.
	opts := []Option{RapidChecks(c.Checks), ShrinkTime(10 * time.Second), func(s *settings) { s.entry = entryCLI }}
	if c.Only != "" {
		names := strings.Split(c.Only, ",")
		for i := range names {
			names[i] = strings.TrimSpace(names[i])
		}
		if err := ValidateOnly(names); err != nil {
			return nil, fmt.Errorf("--only: %w", err)
		}
		opts = append(opts, Only(names...))
	}
	if c.Seed != 0 {
		opts = append(opts, Seed(c.Seed))
	}
	if c.RapidSeed != 0 {
		opts = append(opts, RapidSeed(c.RapidSeed))
	}
	if c.Artifacts != "" {
		// Refused now, not after minutes of checks when a failure has
		// nowhere to go.
		if err := outdir.Check("--artifacts", c.Artifacts); err != nil {
			return nil, err
		}
		opts = append(opts, ArtifactsDir(c.Artifacts))
	}
	return opts, nil
}

// Write prints cert to stdout (JSON with --json, else text), writes the
// JUnit file if asked, and returns the exit code.
func (c *CLI) Write(stdout io.Writer, cert Certificate) (int, error) {
	if c.JUnit != "" {
		if err := cert.WriteJUnit(c.JUnit); err != nil {
			return 2, fmt.Errorf("--junit: %w", err)
		}
	}
	var err error
	if c.JSON {
		err = cert.WriteJSON(stdout)
	} else {
		err = cert.WriteText(stdout)
	}
	if err != nil {
		return 2, err
	}
	return cert.ExitCode(), nil
}

// Main certifies the backend of factories (one per configuration; see
// pgcert for Postgres-backed stores) from a program's main: it reads the
// flags of CLI from os.Args, prints the same report as `deliverysim
// certify` and exits 0 when the store is certified, 1 when a check
// failed or none ran, 2 on a bad command line or a backend that cannot
// be reached. SIGINT or SIGTERM stops it as they stop deliverysim: the
// check running is abandoned (its stores closed, a pgcert schema
// dropped), the partial report is printed (--json too) and it exits
// ExitInterrupted (130); a second signal kills it at once.
func Main(factories ...Factory) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// The default action is back: a second signal kills at once.
		stop()
	}()
	os.Exit(MainContext(ctx, os.Args[1:], os.Stdout, os.Stderr, factories...))
}

// MainArgs is Main with its arguments and output given, returning the exit
// code instead of exiting; nothing stops it.
func MainArgs(args []string, stdout, stderr io.Writer, factories ...Factory) int {
	return MainContext(context.Background(), args, stdout, stderr, factories...)
}

// MainContext is MainArgs that ctx stops: when it ends, the report of what
// ran so far is printed and the code is ExitInterrupted.
func MainContext(ctx context.Context, args []string, stdout, stderr io.Writer, factories ...Factory) int {
	name := "certify"
	if len(factories) > 0 {
		name = "certify " + factories[0].Name
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cli CLI
	cli.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q; every setting is a flag (-h lists them)\n", name, fs.Arg(0))
		return 2
	}
	opts, err := cli.Options()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	cert, err := Certify(factories, append(opts, Context(ctx))...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	code, err := cli.Write(stdout, cert)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	if cert.Interrupted {
		fmt.Fprintf(stderr, "%s: interrupted; the report is partial (%s)\n", name, cert.StopNote())
	}
	return code
}
