package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/deliverysim/deliverysim/impl/pgstore"
)

// cmdPgWhich tells which PostgreSQL the CLI would use, found the CLI's way
// ($DELIVERYSIM_PG_DSN, else the local default server if it answers): its
// DSN on stdout (nothing if none), one line on stderr saying which and
// why. `make test` runs it so the test binaries use the same server the
// CLI does, and so the log says which Postgres the tests ran against or
// why its tests skip, instead of a skip visible only in verbose output.
func (a *app) cmdPgWhich(args []string) (int, error) {
	fs := newFlagSet("pgwhich", a.stderr)
	prefix := fs.String("say", "deliverysim", "what to start the line on stderr with")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	require := a.getenv("DELIVERYSIM_REQUIRE_PG") == "1"
	if dsn := a.getenv("DELIVERYSIM_PG_DSN"); dsn != "" {
		if err := pingQuick(a.ctx, dsn); err != nil {
			fmt.Fprintf(a.stderr, "%s: DELIVERYSIM_PG_DSN=%s does not answer (%v): the Postgres tests will fail\n", *prefix, redactDSN(dsn), pgstore.DescribeConnError(dsn, err))
		} else {
			fmt.Fprintf(a.stderr, "%s: Postgres tests run against %s (from DELIVERYSIM_PG_DSN)\n", *prefix, redactDSN(dsn))
		}
		fmt.Fprintln(a.stdout, dsn)
		return 0, nil
	}
	if err := pingQuick(a.ctx, defaultDSN); err == nil {
		fmt.Fprintf(a.stderr, "%s: Postgres tests run against the local server %s (DELIVERYSIM_PG_DSN unset; it answered)\n", *prefix, defaultDSN)
		fmt.Fprintln(a.stdout, defaultDSN)
		return 0, nil
	}
	then := "skip"
	if require {
		then = "fail (DELIVERYSIM_REQUIRE_PG=1)"
	}
	if dockerMayAnswer(a.getenv) {
		fmt.Fprintf(a.stderr, "%s: no DELIVERYSIM_PG_DSN and nothing answers at %s: the Postgres tests start a postgres:16-alpine container, or %s if Docker does not answer\n", *prefix, defaultDSN, then)
	} else {
		fmt.Fprintf(a.stderr, "%s: no DELIVERYSIM_PG_DSN, nothing answers at %s and no Docker engine: the Postgres tests %s (set DELIVERYSIM_PG_DSN to run them)\n", *prefix, defaultDSN, then)
	}
	return 0, nil
}

func pingQuick(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return probe(ctx, dsn)
}

// dockerMayAnswer: a Docker socket or DOCKER_HOST exists (whether an
// engine answers there, the tests' own probe finds out).
func dockerMayAnswer(getenv func(string) string) bool {
	if getenv("DOCKER_HOST") != "" {
		return true
	}
	_, err := os.Stat("/var/run/docker.sock")
	return err == nil
}
