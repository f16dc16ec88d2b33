package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/conformance/pgcert"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/pgstore"
)

// The certify report is conformance's Certificate, so that an
// implementer's own program (conformance.Main) prints exactly this.
type (
	certifyReport = conformance.Certificate
	guarantee     = conformance.Guarantee
)

// The capabilities both of our backends have and declare.
var ourFeatures = conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true}

// cmdCertify runs the store conformance suite against one of our backends:
// impl/pgstore on the given server (what an operator runs before pointing
// the engine at a new PostgreSQL-compatible database), each check in a
// schema of its own and the whole suite once per session time zone
// (pgcert.TimeZones), or memstore. Flags, report and exit codes are
// conformance.CLI's, shared with conformance.Main.
func (a *app) cmdCertify(args []string) (int, error) {
	fs := newFlagSet("certify", a.stderr)
	backend := fs.String("backend", "postgres", "which of our stores to certify: postgres (impl/pgstore) or memory (impl/memstore)")
	dsn := fs.String("dsn", "", "Postgres DSN (default $DELIVERYSIM_PG_DSN, else the local server)")
	var cli conformance.CLI
	cli.Register(fs)
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	opts, err := cli.Options()
	if err != nil {
		return 2, usagef("certify: %v", err)
	}
	c := common{backend: *backend, dsn: *dsn}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	var factories []conformance.Factory
	switch c.backend {
	case "memory":
		factories = []conformance.Factory{{
			Name: "memstore",
			New: func(t testing.TB) impl.Store {
				s := memstore.New()
				t.Cleanup(func() { _ = s.Close() })
				return s
			},
			Features: ourFeatures,
		}}
	default:
		if err := a.checkBackend(&c); err != nil {
			return 2, err
		}
		factories = pgcert.Factories("pgstore", c.dsn, a.openPgstore, ourFeatures)
	}
	// SIGINT and SIGTERM end a.ctx: the check running is abandoned (its
	// schema dropped) and the partial report is printed below.
	cert, err := conformance.Certify(factories, append(opts, conformance.Context(a.ctx))...)
	if err != nil {
		return 2, &envError{err: fmt.Errorf("certify: %w", err)}
	}
	if c.backend == "postgres" {
		cert.DSN = redactDSN(c.dsn)
	}
	code, err := cli.Write(a.stdout, cert)
	if err != nil {
		return code, err
	}
	for _, r := range cert.Failures() {
		title := "deliverysim certify: " + r.Name + " failed"
		if r.Variant != "" {
			title += " (" + r.Variant + ")"
		}
		a.annotate(annotation{title: title, msg: r.Summary})
	}
	if cert.Interrupted {
		fmt.Fprintf(a.stderr, "deliverysim: certify interrupted; the report is partial (%s)\n", cert.StopNote())
	}
	if a.ctx.Err() != nil {
		return exitInterrupted, nil
	}
	return code, nil
}

// openPgstore opens pgstore in the schema pgcert created for one check.
func (a *app) openPgstore(ctx context.Context, dsn, schema string) (impl.Store, error) {
	return pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Migrate: true, MaxConns: 8, ApplicationName: "deliverysim-certify"})
}
