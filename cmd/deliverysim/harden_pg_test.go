package main

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/internal/pgschema"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

func pgExec(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

func schemasLike(t *testing.T, dsn, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY 1`, prefix)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// gc drops the project's schemas older than --older-than and nothing else.
func TestGCDropsOnlyOldProjectSchemas(t *testing.T) {
	dsn := pgtest.DSN(t)
	old := pgschema.Name(pgschema.KindRun, "gc-test", time.Now().Add(-2*time.Hour))
	fresh := pgschema.Name(pgschema.KindRun, "gc-test", time.Now())
	other := fmt.Sprintf("gc_test_other_%d", os.Getpid())
	for _, s := range []string{old, fresh, other} {
		pgExec(t, dsn, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize())
		t.Cleanup(func() { pgExec(t, dsn, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE") })
	}
	// Only this test's schemas: the prefix narrows to its pid's run schemas.
	code, out, errS := cli(t, nil, "gc", "--dsn", dsn, "--older-than", "1h", "--prefix", pgschema.Prefix+pgschema.KindRun+"_", "--json")
	if code != 0 {
		t.Fatalf("gc: exit %d %s", code, errS)
	}
	rep := decode[gcReport](t, out)
	var dropped []string
	for _, o := range rep.Schemas {
		if o.Dropped {
			dropped = append(dropped, o.Schema)
		}
	}
	if !strings.Contains(strings.Join(dropped, " "), old) || strings.Contains(strings.Join(dropped, " "), fresh) {
		t.Fatalf("gc dropped %v; want %s and not %s", dropped, old, fresh)
	}
	left := strings.Join(append(schemasLike(t, dsn, "dsim_run_"), schemasLike(t, dsn, "gc_test_other_")...), " ")
	if strings.Contains(left, old) || !strings.Contains(left, fresh) || !strings.Contains(left, other) {
		t.Fatalf("after gc: %s", left)
	}
	oneLineExit2(t, "does not start with", "gc", "--dsn", dsn, "--prefix", "gc_test_")
}

// gc --legacy collects the project's old-style schemas (names from before
// they carried a creation time), of exactly the shapes the project made,
// and leaves look-alikes. Issue 28: it dropped them whatever their age, on
// by default, which on a shared database could take an old checkout's
// schema in use. Now it is opt-in and ages them from the first gc that saw
// them (recorded in the schema's comment): a schema first seen now is
// kept; one first seen a year ago goes.
func TestGCLegacySchemasAgedFromFirstSighting(t *testing.T) {
	dsn := pgtest.DSN(t)
	pid := os.Getpid()
	ours := []string{
		fmt.Sprintf("t_testgclegacy_%d_1_0a1b2c", pid),
		fmt.Sprintf("bench_%d_0a1b2c3d", pid),
		fmt.Sprintf("dsim_7_%d_1_0a1b2c", pid),
	}
	notOurs := []string{
		fmt.Sprintf("t_testgclegacy_%d_keep", pid),
		fmt.Sprintf("bench_%d_keep", pid),
		fmt.Sprintf("t_testgclegacy_%d_2_0a1b2c", pid), // the shape, but someone's comment
	}
	for _, s := range append(append([]string{}, ours...), notOurs...) {
		pgExec(t, dsn, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize())
		t.Cleanup(func() { pgExec(t, dsn, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE") })
	}
	pgExec(t, dsn, "COMMENT ON SCHEMA "+pgx.Identifier{notOurs[2]}.Sanitize()+" IS 'orders archive, keep'")
	exists := func(s string) bool { return len(schemasLike(t, dsn, s)) > 0 }
	gc := func(args ...string) map[string]pgschema.Orphan {
		t.Helper()
		// A year's threshold keeps every current-style schema of
		// concurrent test binaries out of this.
		code, out, errS := cli(t, nil, append([]string{"gc", "--dsn", dsn, "--older-than", "8760h", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("gc %v: exit %d %s", args, code, errS)
		}
		reported := map[string]pgschema.Orphan{}
		for _, o := range decode[gcReport](t, out).Schemas {
			reported[o.Schema] = o
		}
		return reported
	}
	// Not asked for (the default), or a narrower prefix: not looked at.
	for _, args := range [][]string{nil, {"--legacy", "--prefix", pgschema.Prefix + pgschema.KindRun + "_"}} {
		rep := gc(args...)
		for _, s := range ours {
			if _, ok := rep[s]; ok || !exists(s) {
				t.Fatalf("gc %v touched the old-style %s", args, s)
			}
		}
	}
	// First sighting: recorded, kept.
	rep := gc("--legacy")
	for _, s := range ours {
		o, ok := rep[s]
		if !ok || o.Dropped || o.Kept == "" || o.FirstSeen.IsZero() || !o.Legacy || !strings.HasPrefix(o.Kind, "legacy-") || !exists(s) {
			t.Errorf("%s first seen: reported %+v (found %v), still there: %v; want kept with its first sighting", s, o, ok, exists(s))
		}
	}
	// A year later (the comment says so) it goes; one first seen now stays.
	for _, s := range ours[:2] {
		pgExec(t, dsn, "COMMENT ON SCHEMA "+pgx.Identifier{s}.Sanitize()+" IS 'deliverysim gc: first seen 2020-01-02T03:04:05Z'")
	}
	rep = gc("--legacy")
	for _, s := range ours[:2] {
		if o := rep[s]; !o.Dropped || exists(s) {
			t.Errorf("%s first seen in 2020: reported %+v, still there: %v", s, o, exists(s))
		}
	}
	if o := rep[ours[2]]; o.Dropped || !exists(ours[2]) {
		t.Errorf("%s first seen just now was dropped: %+v", ours[2], o)
	}
	for _, s := range notOurs {
		if _, ok := rep[s]; ok || !exists(s) {
			t.Errorf("gc touched %s, which is not the project's", s)
		}
	}
}

// An interrupted Postgres sweep drops the schemas of its runs.
func TestInterruptedPostgresSweepLeavesNoSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	// Only this process's schemas: other packages' test binaries (chaos
	// runs) make run schemas of their own at the same time (CI saw one
	// counted here).
	before := len(runSchemasOfPid(t, dsn, os.Getpid()))
	ctx, cancel := context.WithCancel(context.Background())
	out, _, done := sweepRunning(t, ctx, cancel, "--seeds", "1-100000", "--backend", "postgres", "--dsn", dsn, "--json", "--parallel", "2")
	code := <-done
	rep := decode[sweepReport](t, out.String())
	if code != exitInterrupted || !rep.Interrupted || rep.SeedsRun == 0 {
		t.Fatalf("exit %d, interrupted %v, seeds run %d", code, rep.Interrupted, rep.SeedsRun)
	}
	if after := runSchemasOfPid(t, dsn, os.Getpid()); len(after) > before {
		t.Fatalf("%d run schemas before, %d after the interrupted sweep: %v", before, len(after), after)
	}
}

func TestCertifyPgstore(t *testing.T) {
	dsn := pgtest.DSN(t)
	junit := filepath.Join(t.TempDir(), "certify.xml")
	code, out, errS := cli(t, nil, "certify", "--dsn", dsn, "--checks", "5", "--json", "--junit", junit)
	if code != 0 {
		t.Fatalf("certify: exit %d\n%s\n%s", code, out, errS)
	}
	rep := decode[certifyReport](t, out)
	if !rep.Passed || len(rep.Guarantees) != 3 {
		t.Fatalf("certify report: %+v", rep)
	}
	for _, g := range rep.Guarantees {
		if g.Status != "pass" || g.Checks == 0 {
			t.Errorf("guarantee %s: %s (%d checks)", g.Group, g.Status, g.Checks)
		}
	}
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var js xunitSuites
	if err := xml.Unmarshal(data, &js); err != nil || js.Tests != len(rep.Results) || js.Failures != 0 {
		t.Fatalf("JUnit: %v, %d tests (want %d), %d failures", err, js.Tests, len(rep.Results), js.Failures)
	}
	// Only this process's: other checkouts certify on the same server at
	// the same time.
	var left []string
	for _, s := range schemasOfPid(t, dsn, os.Getpid()) {
		if strings.HasPrefix(s, pgschema.Prefix+pgschema.KindCert+"_") {
			left = append(left, s)
		}
	}
	if len(left) > 0 {
		t.Errorf("certify left schemas behind: %v", left)
	}
}

// Defect 6 of issue 11: when the database goes away mid-sweep, the seeds in
// flight fail at once instead of retrying their store calls (each a
// connect attempt) until their virtual deadline; the sweep ends saying so.
// Before the health watcher, 3 seeds took 8 minutes of failed connects; the
// bound here is only a hang detector (the time taken is logged). What is
// judged: a failing exit, a line saying why, and seeds no longer started.
func TestSweepFailsFastWhenTheDatabaseGoesAway(t *testing.T) {
	dsn := pgtest.DSN(t)
	px := pgtest.StartProxy(t, dsn)
	before := map[string]bool{}
	for _, s := range runSchemasOfPid(t, dsn, os.Getpid()) {
		before[s] = true
	}
	t.Cleanup(func() {
		// What the sweep could not drop through the cut proxy; only this
		// process's, since other test binaries' runs are live meanwhile.
		for _, s := range runSchemasOfPid(t, dsn, os.Getpid()) {
			if !before[s] {
				// IF EXISTS: a DROP the sweep sent just before the cut may
				// still complete on the server after this listing (CI saw
				// "does not exist" once).
				pgExec(t, dsn, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
			}
		}
	})
	var cut time.Time
	out, errb, done := sweepRunning(t, context.Background(), func() { px.Cut(); cut = time.Now() },
		"--seeds", "1-2000", "--backend", "postgres", "--dsn", px.DSN, "--json", "--parallel", "2")
	var code int
	select {
	case code = <-done:
	case <-time.After(5 * time.Minute): // a hang detector: how fast it ends is logged, not judged
		t.Fatalf("the sweep still runs 5 minutes after the database went away:\n%s", errb.String())
	}
	t.Logf("the sweep ended %s after the cut, exit %d", time.Since(cut).Round(time.Millisecond), code)
	if code == 0 {
		t.Fatalf("exit 0 after the database went away:\n%s", errb.String())
	}
	// Seeds that open their store after the cut fail on the refused
	// connect before the watcher has seen two failed probes; either way
	// the output must say what happened.
	if said := errb.String() + out.String(); !strings.Contains(said, "went away") && !strings.Contains(said, "unreachable") {
		t.Fatalf("nothing says the database went away:\nstderr: %s\nstdout: %.2000s", errb.String(), out.String())
	}
	// The finished seeds are reported; the sweep stopped starting new ones
	// once the database was gone, rather than failing each of them.
	rep := decode[sweepReport](t, out.String())
	if rep.SeedsRun == 0 || rep.SeedsRun >= 2000 {
		t.Fatalf("seeds run %d of 2000: want the ones before the loss, not all", rep.SeedsRun)
	}
	t.Logf("%d seeds reported, %d errors", rep.SeedsRun, rep.ErrorsTotal)
}

// A SIGKILLed chaos cannot remove its temp folder; gc collects the chaos
// and smoke folders whose newest write is older than --older-than, and
// nothing else under $TMPDIR (issue 28).
func TestGCRemovesOldChaosTempFolders(t *testing.T) {
	dsn := pgtest.DSN(t)
	root := t.TempDir()
	old := time.Now().Add(-3 * time.Hour)
	mk := func(name string, when time.Time) string {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Join(p, "state"), 0o755))
		f := filepath.Join(p, "state", "engine.log")
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
		for _, q := range []string{f, filepath.Join(p, "state"), p} {
			require.NoError(t, os.Chtimes(q, when, when))
		}
		return p
	}
	stale := mk("deliverysim-chaos-123", old)
	staleSmoke := mk("deliverysim-smoke-9", old)
	fresh := mk("deliverysim-chaos-456", time.Now())
	// An old folder whose log was just written: a chaos still running.
	running := mk("deliverysim-chaos-789", old)
	now := time.Now()
	require.NoError(t, os.Chtimes(filepath.Join(running, "state", "engine.log"), now, now))
	notOurs := mk("someone-else-1", old)

	code, out, errS := cli(t, map[string]string{"TMPDIR": root}, "gc", "--dsn", dsn, "--older-than", "1h",
		"--prefix", pgschema.Prefix+"nothing_here_", "--json")
	require.Equal(t, 0, code, errS)
	rep := decode[gcReport](t, out)
	var removed []string
	for _, l := range rep.TempDirs {
		require.True(t, l.Removed, "%+v", l)
		removed = append(removed, l.Path)
	}
	assert.Equal(t, []string{stale, staleSmoke}, removed)
	for _, p := range []string{stale, staleSmoke} {
		assert.NoDirExists(t, p)
	}
	for _, p := range []string{fresh, running, notOurs} {
		assert.DirExists(t, p)
	}
}
