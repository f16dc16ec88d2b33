package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgschema"
)

type certifyReport struct {
	SchemaVersion int                  `json:"schema_version"`
	Backend       string               `json:"backend"`
	DSN           string               `json:"dsn"` // password removed
	Passed        bool                 `json:"passed"`
	Guarantees    []guarantee          `json:"guarantees"`
	Results       []conformance.Result `json:"results"`
}

// guarantee is one group of the suite, as an operator reads it.
type guarantee struct {
	Group   string `json:"group"`
	Meaning string `json:"meaning"`
	Status  string `json:"status"` // pass, fail, skip
	Checks  int    `json:"checks"`
	Failed  int    `json:"failed"`
}

var guaranteeMeaning = map[string]string{
	conformance.GroupContract:        "every store call does what the contract says, call by call",
	conformance.GroupStateMachine:    "random call sequences match the reference model's state",
	conformance.GroupLinearizability: "concurrent calls behave as if one at a time (porcupine)",
}

// cmdCertify runs the store conformance suite against impl/pgstore on the
// given server: what an operator runs before pointing the engine at a new
// PostgreSQL-compatible database. Each check gets a schema of its own
// (pgschema.KindCert), dropped when the check ends.
func (a *app) cmdCertify(args []string) (int, error) {
	fs := newFlagSet("certify", a.stderr)
	dsn := fs.String("dsn", "", "Postgres DSN (default $DELIVERYSIM_PG_DSN, else the local server)")
	jsonOut := fs.Bool("json", false, "print a JSON report on stdout")
	junit := fs.String("junit", "", "also write a JUnit XML report (one test case per check) to this file")
	checks := fs.Int("checks", 100, "random sequences the state machine tries (1 to 100000)")
	only := fs.String("only", "", "comma-separated groups or checks to run (Contract, StateMachine, Linearizability, Contract/AckDeletes, ...)")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *checks < 1 || *checks > 100000 {
		return 2, usagef("--checks %d is outside [1, 100000]", *checks)
	}
	c := common{backend: "postgres", dsn: *dsn}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	if err := a.checkBackend(&c); err != nil {
		return 2, err
	}
	opts := []conformance.Option{conformance.RapidChecks(*checks), conformance.ShrinkTime(10 * time.Second)}
	if *only != "" {
		opts = append(opts, conformance.Only(strings.Split(*only, ",")...))
	}
	f := conformance.Factory{
		Name:     "pgstore",
		New:      func(t testing.TB) impl.Store { return a.certStore(t, c.dsn) },
		Features: conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true},
	}
	start := time.Now()
	rep := conformance.Check(f, opts...)
	out := certifyReport{SchemaVersion: schemaVersion, Backend: rep.Backend, DSN: redactDSN(c.dsn), Passed: rep.Passed(), Results: rep.Results}
	for _, g := range []string{conformance.GroupContract, conformance.GroupStateMachine, conformance.GroupLinearizability} {
		gr := guarantee{Group: g, Meaning: guaranteeMeaning[g], Status: "skip"}
		ran := 0
		for _, r := range rep.Results {
			if r.Group != g {
				continue
			}
			gr.Checks++
			if r.Status == conformance.Fail {
				gr.Failed++
			}
			if r.Status != conformance.Skip {
				ran++
			}
		}
		switch {
		case gr.Failed > 0:
			gr.Status = "fail"
		case ran > 0:
			gr.Status = "pass"
		}
		out.Guarantees = append(out.Guarantees, gr)
	}
	if *junit != "" {
		var cases []xunitCase
		for _, r := range rep.Results {
			tc := xunitCase{Classname: "deliverysim.certify." + r.Group, Name: r.Name, Time: seconds(r.Duration)}
			switch r.Status {
			case conformance.Fail:
				tc.Failure = &xunitMessage{Message: r.Summary, Type: r.Group, Text: r.Message}
			case conformance.Skip:
				tc.SystemOut = "skipped: " + r.Summary
			}
			cases = append(cases, tc)
		}
		if err := writeJUnit(*junit, xunitSuites{Name: "deliverysim certify", Suites: []xunitSuite{suite("certify pgstore", time.Since(start), cases)}}); err != nil {
			return 2, fmt.Errorf("--junit: %v", err)
		}
	}
	if *jsonOut {
		if err := writeJSON(a.stdout, out); err != nil {
			return 2, err
		}
	} else {
		fmt.Fprintf(a.stdout, "certifying pgstore on %s\n\n", redactDSN(c.dsn))
		for _, g := range out.Guarantees {
			fmt.Fprintf(a.stdout, "%-5s %-16s %s (%d checks, %d failed)\n", strings.ToUpper(g.Status), g.Group, g.Meaning, g.Checks, g.Failed)
		}
		fmt.Fprintln(a.stdout)
		fmt.Fprint(a.stdout, rep.String())
		if out.Passed {
			fmt.Fprintln(a.stdout, "verdict: PASS (this server may back the engine)")
		} else {
			fmt.Fprintln(a.stdout, "verdict: FAIL (do not run the engine on this server)")
		}
	}
	for _, r := range rep.Failures() {
		a.annotate(annotation{title: "deliverysim certify: " + r.Name + " failed", msg: r.Summary})
	}
	if a.ctx.Err() != nil {
		return exitInterrupted, nil
	}
	if !out.Passed {
		return 1, nil
	}
	return 0, nil
}

// certStore opens pgstore in a fresh schema, dropped at t's cleanup.
func (a *app) certStore(t testing.TB, dsn string) impl.Store {
	schema := pgschema.Name(pgschema.KindCert, "", time.Now())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), time.Minute)
	defer cancel()
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Migrate: true, MaxConns: 8, ApplicationName: "deliverysim-certify"})
	if err != nil {
		_ = pgstore.DropSchema(context.WithoutCancel(a.ctx), dsn, schema)
		t.Fatalf("open pgstore in schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = pgstore.DropSchema(context.WithoutCancel(a.ctx), dsn, schema)
	})
	return s
}
