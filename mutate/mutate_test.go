package mutate

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

func fixtureMutants(t *testing.T) ([]Mutant, []byte) {
	t.Helper()
	ms, err := Generate(GenerateOptions{Root: "..", Pkg: "mutate/testdata/fixture"})
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("testdata/fixture/fixture.go")
	if err != nil {
		t.Fatal(err)
	}
	return ms, src
}

// Every operator produces the change it names, at the right place, and
// nothing else; the string concatenation is not mutated arithmetically.
func TestOperatorsOnFixture(t *testing.T) {
	ms, src := fixtureMutants(t)
	want := map[string]string{ // id suffix -> text of the mutated line
		"fixture.go:18:9:conditionals-boundary": "if e.n <= limit && !e.ok {",
		"fixture.go:18:9:conditionals-negation": "if e.n >= limit && !e.ok {",
		"fixture.go:18:17:invert-logical":       "if e.n < limit || !e.ok {",
		"fixture.go:18:20:boolean-flip":         "if e.n < limit && e.ok {",
		"fixture.go:19:6:increment":             "e.n--",
		"fixture.go:21:12:arithmetic":           "e.n = e.n / 2",
		"fixture.go:22:9:boolean-flip":          "e.ok = false",
		"fixture.go:21:2:delete-statement":      "",
		"fixture.go:23:28:drop-error-check":     "if err := e.store.Ack(k); false {",
	}
	byID := map[string]Mutant{}
	for _, m := range ms {
		byID[strings.TrimPrefix(m.ID, "mutate/testdata/fixture/")] = m
		if m.Operator == OpArithmetic && m.Line == 27 {
			t.Errorf("string + mutated: %s", m.ID)
		}
		if m.Invalid != "" && m.Operator != OpDeleteStmt {
			t.Errorf("%s does not type-check: %s", m.ID, m.Invalid)
		}
		// A function that returns at once unless a known-bug switch is on
		// is the variant's own code: only the switch is mutated.
		if m.Func == "(*engine).lossy" && m.Change != "!x -> x" || strings.Contains(m.Change, "e.lossy(") || m.Func == "(*engine).dropAll" {
			t.Errorf("known-bug-only code mutated: %s (%s)", m.ID, m.Change)
		}
	}
	if _, ok := byID["fixture.go:34:5:boolean-flip"]; !ok {
		t.Error("the known-bug switch guarding lossy is not mutated")
	}
	if _, ok := byID["fixture.go:50:5:increment"]; !ok {
		t.Error("drain's own code (outside its known-bug branch) is not mutated")
	}
	for id, line := range want {
		m, ok := byID[id]
		if !ok {
			t.Errorf("no mutant %s", id)
			continue
		}
		got := strings.Split(string(m.Apply(src)), "\n")[m.Line-1]
		if strings.TrimSpace(got) != line {
			t.Errorf("%s: line %d became %q, want %q", id, m.Line, strings.TrimSpace(got), line)
		}
	}
	// The two consecutive store writes are swapped.
	sw, ok := byID["fixture.go:23:2:swap-store-writes"]
	if !ok {
		t.Fatal("no swap of the Ack check and the Fail call")
	}
	out := string(sw.Apply(src))
	if strings.Index(out, "e.store.Fail(k)") > strings.Index(out, "e.store.Ack(k)") {
		t.Errorf("swap did not move Fail before Ack:\n%s", out)
	}
	// Deleting a statement the function needs for its types is invalid.
	if m := byID["fixture.go:26:2:delete-statement"]; m.Invalid != "" {
		t.Errorf("deleting e.store.Fail(k) should compile: %s", m.Invalid)
	}
}

// The guarded (schemata) copy of a file holds every mutant and still
// parses; with no mutant on, it is the original program.
func TestGuardedFileParses(t *testing.T) {
	ms, src := fixtureMutants(t)
	var ks []int
	var ok []Mutant
	for i, m := range ms {
		if m.Invalid == "" {
			ok = append(ok, m)
			ks = append(ks, i)
		}
	}
	af, err := parser.ParseFile(token.NewFileSet(), "f.go", src, parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	g := Guard(src, int(af.Name.End())-1, "example.com/m", ok, ks)
	if _, err := parser.ParseFile(token.NewFileSet(), "g.go", g, 0); err != nil {
		t.Fatalf("guarded file does not parse: %v\n%s", err, g)
	}
	if n := strings.Count(string(g), "mutschema.On("); n < len(ok) {
		t.Errorf("%d guards for %d mutants", n, len(ok))
	}
}

// End to end on the receiver: a mutant that never records a handled id in
// the in-memory dedup cache is killed by the blind sweep (a redelivered
// event runs the handler twice); one that numbers a malformed secret from
// 0 in ParseSecrets' error, which no simulated run configures, gets past
// the harness and is killed by the package's own unit test
// (TestParseSecretsWhsec); one that only skips clearing a popped slot
// (memory hygiene) survives both. This builds deliverysim and the
// receiver's test binary once.
func TestKillsAKillableMutantAndNotAnEquivalentOne(t *testing.T) {
	ms, err := List("..", []string{"impl/receiver"})
	if err != nil {
		t.Fatal(err)
	}
	var killable, equivalent, unitOnly string
	for _, m := range ms {
		switch {
		case m.Func == "ParseSecrets" && m.Operator == OpArithmetic && strings.Contains(m.Snippet, "i+1"):
			unitOnly = m.ID
		case m.Func == "(*MemoryDedup).Claim" && m.Operator == OpDeleteStmt && strings.Contains(m.Change, "m.index[id] = e"):
			killable = m.ID
		case m.Func == "(*MemoryDedup).pop" && m.Operator == OpDeleteStmt && strings.Contains(m.Change, "m.order[m.head] = entry{}"):
			equivalent = m.ID
		}
	}
	if killable == "" || equivalent == "" || unitOnly == "" {
		t.Fatalf("impl/receiver changed: update the three mutants this test picks (found %q, %q, %q)", killable, equivalent, unitOnly)
	}
	rep, err := Run(context.Background(), Options{Root: "..", Pkgs: []string{"impl/receiver"}, Seeds: 5, FirstSeed: 1, Pool: 20,
		Parallel: 1, Only: func(m Mutant) bool { return m.ID == killable || m.ID == equivalent || m.ID == unitOnly }})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Mutants {
		switch o.ID {
		case killable:
			if o.Status != Killed || o.By != "sweep" || o.SeedsToKill < 1 {
				t.Errorf("%s: %s by %q after %d seeds, want killed by the sweep", o.ID, o.Status, o.By, o.SeedsToKill)
			}
			if o.Seed < 1 || o.Seed > 20 || o.SeedsRun < o.SeedsToKill || o.SeedsRun > 5 {
				t.Errorf("%s: killed by seed %d after %d of %d seeds run, want a seed of the pool 1..20 within the budget of 5", o.ID, o.Seed, o.SeedsToKill, o.SeedsRun)
			}
		case equivalent:
			// Every seed runs the receiver's pop: the whole budget, each
			// seed running the site.
			if o.Status != Survived || !o.Reached || o.SeedsRun != 5 {
				t.Errorf("%s: %s by %q, reached %v, %d seeds run; want survived after 5 seeds that run its site", o.ID, o.Status, o.By, o.Reached, o.SeedsRun)
			}
		case unitOnly:
			if o.Status != Killed || o.By != UnitTestsBy || o.Check != "TestParseSecretsWhsec" || !strings.Contains(o.Detail, "receiver_test.go:") {
				t.Errorf("%s: %s by %q %q (%s); want killed by the unit test TestParseSecretsWhsec", o.ID, o.Status, o.By, o.Check, o.Detail)
			}
		}
	}
	tot := rep.PerPackage["impl/receiver"]
	if tot.Killed != 2 || tot.KilledUnitTests != 1 || tot.Survived != 1 {
		t.Errorf("totals %+v, want 2 killed (1 by the unit tests) and 1 survived", *tot)
	}
	if len(rep.UnitTests) != 1 || rep.UnitTests[0] != "impl/receiver" || len(rep.UnitTestsSkipped) != 0 {
		t.Errorf("unit-test step ran for %v (skipped %v), want impl/receiver", rep.UnitTests, rep.UnitTestsSkipped)
	}
}

// The shipped survivors file parses and every entry still finds a mutant of
// today's code the way the command finds it (by id, or by file, func, line
// text and operator after lines moved); a stale entry would silently stop
// matching.
func TestSurvivorsFileIsCurrent(t *testing.T) {
	s, err := DefaultSurvivors()
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	seen := map[string]bool{}
	for _, e := range s.Entries {
		p := fileOf(e.ID)
		p = p[:strings.LastIndex(p, "/")]
		if !seen[p] {
			seen[p] = true
			pkgs = append(pkgs, p)
		}
	}
	ms, err := List("..", pkgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Entries {
		found := false
		for _, m := range ms {
			if (m.ID == e.ID && (e.Line == "" || e.Line == m.Snippet)) || (e.Func == m.Func && e.Operator == m.Operator && e.Line == m.Snippet && fileOf(e.ID) == m.File) {
				found = true
			}
		}
		if !found {
			t.Errorf("survivors.yaml: %s matches no mutant of today's code", e.ID)
		}
	}
}

// An entry found by id must still describe the code at that place: after
// an edit above it the same file:line:col names another statement, which
// the entry (equivalent, say) must not cover. It is then found again by its
// function, operator and source line.
func TestSurvivorFindChecksTheSourceLine(t *testing.T) {
	s := &Survivors{Entries: []Survivor{{ID: "impl/engine/x.go:10:2:delete-statement", Func: "f", Line: "a = b", Operator: "delete-statement", Status: Equivalent, Why: "w"}}}
	moved := Mutant{ID: "impl/engine/x.go:10:2:delete-statement", File: "impl/engine/x.go", Func: "g", Snippet: "c = d", Operator: "delete-statement"}
	if e := s.Find(moved); e != nil {
		t.Fatalf("an entry matched by id another statement now at its line: %+v", e)
	}
	relocated := Mutant{ID: "impl/engine/x.go:17:2:delete-statement", File: "impl/engine/x.go", Func: "f", Snippet: "a = b", Operator: "delete-statement", Col: 2}
	if e := s.Find(relocated); e == nil {
		t.Fatal("the entry was not found again at its new line")
	}
	// Two sites of one operator on one line: the entry of one must not
	// cover the other once the line moves (streams.go 297:21 was killed
	// while matching the equivalent entry of 297:37).
	two := &Survivors{Entries: []Survivor{{ID: "impl/engine/x.go:10:37:conditionals-negation", Func: "f", Line: "if a == 0 || b != c {", Operator: "conditionals-negation", Status: Equivalent, Why: "w"}}}
	other := Mutant{ID: "impl/engine/x.go:12:6:conditionals-negation", File: "impl/engine/x.go", Func: "f", Snippet: "if a == 0 || b != c {", Operator: "conditionals-negation", Col: 6}
	if e := two.Find(other); e != nil {
		t.Fatalf("the entry of column 37 matched the site at column 6: %+v", e)
	}
	// Two identical guards in one function: the entry that still sits at
	// its own site (line 20) is that mutant's, never the copy's at line 10
	// (streams.go 354:15 was killed and reported as a stale equivalent
	// entry, the 389:15 one).
	guards := &Survivors{Entries: []Survivor{{ID: "impl/engine/x.go:20:5:conditionals-negation", Func: "f", Line: "if n > 0 {", Operator: "conditionals-negation", Status: Equivalent, Why: "w"}}}
	own := Mutant{ID: "impl/engine/x.go:20:5:conditionals-negation", File: "impl/engine/x.go", Func: "f", Snippet: "if n > 0 {", Operator: "conditionals-negation", Col: 5}
	copyAbove := Mutant{ID: "impl/engine/x.go:10:5:conditionals-negation", File: "impl/engine/x.go", Func: "f", Snippet: "if n > 0 {", Operator: "conditionals-negation", Col: 5}
	guards.Anchor([]Mutant{copyAbove, own})
	if e := guards.Find(copyAbove); e != nil {
		t.Fatalf("the entry at its own site (line 20) was handed to the identical guard at line 10: %+v", e)
	}
	if e := guards.Find(own); e == nil {
		t.Fatal("the entry was not found for its own site")
	}
	// Without its own site among the mutants the entry has moved, and the
	// fallback finds it.
	guards.Anchor([]Mutant{copyAbove})
	if e := guards.Find(copyAbove); e == nil {
		t.Fatal("a moved entry was not found again once its old site is gone")
	}
}

// A failed test binary's output names the deepest failing test and its
// first failure message (testify's Error and Messages, without the trace),
// not an earlier test's log line; a binary that died names the test that
// was running and the fatal error.
func TestUnitFailureNamesTheTestAndItsMessage(t *testing.T) {
	out := "=== RUN   TestReqTable\n" +
		"    reqtable_test.go:13: [rapid] OK, passed 100 tests (28ms)\n" +
		"--- PASS: TestReqTable (0.03s)\n" +
		"=== RUN   TestAck\n" +
		"=== RUN   TestAck/queued\n" +
		"    deferred_test.go:82: \n" +
		"        \tError Trace:\t/x/impl/engine/deferred_test.go:82\n" +
		"        \t            \t/x/impl/engine/deferred_test.go:40\n" +
		"        \tError:      \tNot equal: \n" +
		"        \t            \texpected: 2\n" +
		"        \t            \tactual  : 1\n" +
		"        \tTest:       \tTestAck/queued\n" +
		"        \tMessages:   \tacks written\n" +
		"--- FAIL: TestAck (0.00s)\n" +
		"    --- FAIL: TestAck/queued (0.00s)\n" +
		"FAIL\n"
	o := unitFailure(out)
	if o.Status != Killed || o.By != UnitTestsBy || o.Check != "TestAck/queued" {
		t.Errorf("got %s by %s, check %q", o.Status, o.By, o.Check)
	}
	if want := "deferred_test.go:82: Error: Not equal: expected: 2 actual : 1 Messages: acks written"; o.Detail != want {
		t.Errorf("detail %q, want %q", o.Detail, want)
	}
	died := "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestLen\nfatal error: sync: unlock of unlocked mutex\n\ngoroutine 7 [running]:\n"
	if o := unitFailure(died); o.Check != "TestLen" || o.Detail != "fatal error: sync: unlock of unlocked mutex" {
		t.Errorf("died: check %q, detail %q", o.Check, o.Detail)
	}
}

// A package whose tests reach a database server gets no unit-test step.
func TestUnitTestsOnlyInProcess(t *testing.T) {
	mod := "github.com/deliverysim/deliverysim"
	if why := outOfProcess(mod, []string{"fmt", mod + "/impl/memstore", "pgregory.net/rapid"}); why != "" {
		t.Errorf("in-process deps refused: %s", why)
	}
	for _, d := range []string{mod + "/internal/pgtest", "github.com/jackc/pgx/v5/pgxpool", "database/sql", mod + "/impl/pgstore"} {
		if outOfProcess(mod, []string{"fmt", d}) == "" {
			t.Errorf("%s accepted as in-process", d)
		}
	}
}
