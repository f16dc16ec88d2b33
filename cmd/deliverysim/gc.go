package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgschema"
)

type gcReport struct {
	SchemaVersion int               `json:"schema_version"`
	OlderThan     string            `json:"older_than"`
	Prefix        string            `json:"prefix"`
	DryRun        bool              `json:"dry_run"`
	Schemas       []pgschema.Orphan `json:"schemas"`
	TempDirs      []tempLeftover    `json:"temp_dirs"`
	Interrupted   bool              `json:"interrupted,omitempty"`
}

// cmdGC removes the project's schemas that their creators left behind (a
// process killed before it could drop them). Only names with the project
// prefix and a creation time (pgschema.Name) are considered, so a schema
// someone else made is never touched.
// tempRoot is the system temp folder as the invocation's environment
// names it (os.TempDir's rule, read through the app's getenv).
func tempRoot(getenv func(string) string) string {
	if d := getenv("TMPDIR"); d != "" {
		return d
	}
	return os.TempDir()
}

func (a *app) cmdGC(args []string) (int, error) {
	fs := newFlagSet("gc", a.stderr)
	dsn := fs.String("dsn", "", "Postgres DSN (default $DELIVERYSIM_PG_DSN, else the local server)")
	older := fs.Duration("older-than", time.Hour, "drop only schemas created at least this long ago (0 to 8760h)")
	prefix := fs.String("prefix", pgschema.Prefix, "drop only schemas whose names start with this (it must start with "+pgschema.Prefix+")")
	dry := fs.Bool("dry-run", false, "list what would be dropped; drop nothing")
	legacy := fs.Bool("legacy", false, "with the default --prefix, also collect schemas with the project's old-style names (t_<test>_<pid>_<seq>_<hex>, bench_<pid>_<hex>, dsim_<seed>_<pid>_<seq>_<hex>); their names carry no age, so the first gc that sees one records the instant in its comment and a gc --older-than later drops it")
	jsonOut := fs.Bool("json", false, "print a JSON report on stdout")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *older < 0 || *older > 8760*time.Hour {
		return 2, usagef("--older-than %v is outside [0, 8760h]", *older)
	}
	if !strings.HasPrefix(*prefix, pgschema.Prefix) {
		return 2, usagef("--prefix %q does not start with %q; gc removes only the project's schemas", *prefix, pgschema.Prefix)
	}
	c := common{backend: "postgres", dsn: *dsn}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	// Connecting and each statement are bounded (pgschema.ConnectTimeout,
	// StatementTimeout); this bounds a long list of drops.
	ctx, cancel := context.WithTimeout(a.ctx, 5*time.Minute)
	defer cancel()
	orphans, err := pgschema.GC(ctx, c.dsn, pgschema.GCOptions{Prefix: *prefix, OlderThan: *older, Now: time.Now(), DryRun: *dry, Legacy: *legacy})
	interrupted := a.interrupted()
	if err != nil && !interrupted {
		return 2, &envError{err: pgstore.DescribeConnError(c.dsn, err)}
	}
	var temps []tempLeftover
	if !interrupted {
		temps = gcTempDirs(tempRoot(a.getenv), *older, time.Now(), *dry)
	}
	failed := 0
	for _, l := range temps {
		if l.Error != "" {
			failed++
		}
	}
	for _, o := range orphans {
		if o.Error != "" {
			failed++
		}
	}
	if *jsonOut {
		rep := gcReport{SchemaVersion: schemaVersion, OlderThan: older.String(), Prefix: *prefix, DryRun: *dry, Schemas: orphans, Interrupted: interrupted}
		if rep.Schemas == nil {
			rep.Schemas = []pgschema.Orphan{}
		}
		rep.TempDirs = temps
		if rep.TempDirs == nil {
			rep.TempDirs = []tempLeftover{}
		}
		if err := writeJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		verb := "dropped"
		if *dry {
			verb = "would drop"
		}
		for _, o := range orphans {
			state := verb
			switch {
			case o.Error != "":
				state = "FAILED: " + o.Error
			case o.Kept != "":
				state = "kept"
			}
			created := "created " + o.Created.Format(time.RFC3339)
			if o.Legacy {
				created = "an old-style name, first seen by gc " + o.FirstSeen.Format(time.RFC3339)
				if o.Kept != "" {
					created = o.Kept
				}
			}
			fmt.Fprintf(a.stdout, "%s  %s (%s)\n", state, o.Schema, created)
		}
		n := 0
		for _, o := range orphans {
			if o.Error == "" && o.Kept == "" {
				n++
			}
		}
		fmt.Fprintf(a.stdout, "%d schemas starting with %s older than %v %s\n", n, *prefix, *older, verb)
		for _, l := range temps {
			state := verb
			if l.Error != "" {
				state = "FAILED: " + l.Error
			}
			fmt.Fprintf(a.stdout, "%s  %s (a chaos run's folder, last written %s)\n", state, l.Path, l.LastWrite.Format(time.RFC3339))
		}
		if interrupted {
			fmt.Fprintln(a.stdout, "interrupted: the schemas not listed were not looked at")
		}
	}
	if interrupted {
		return exitInterrupted, nil
	}
	if failed > 0 {
		return 2, nil
	}
	return 0, nil
}
