package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// The certify tests run the built binary, not cmdCertify in process: a
// test binary has testing's flags registered and parsed, which is exactly
// what hid rapid's "testing: Short called before Init" panic from every
// in-process test while the real command failed on every run.

// buildDeliverysim builds ./cmd/deliverysim into dir.
func buildDeliverysim(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "deliverysim")
	if err := goBuild(bin, "."); err != nil {
		t.Fatal(err)
	}
	return bin
}

func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return errors.New("go build " + pkg + ": " + err.Error() + "\n" + stderr.String())
	}
	return nil
}

// runBinary runs bin in a fresh directory (so that nothing a run leaves,
// such as testdata/rapid, reaches the next) and returns its exit code and
// output.
func runBinary(t *testing.T, env []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	return runBinaryIn(t, t.TempDir(), env, bin, args...)
}

// runBinaryIn is runBinary in the working directory dir.
func runBinaryIn(t *testing.T, dir string, env []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errb.String()
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return 0, out.String(), errb.String()
}

// assertCertified checks a passing certificate in which every group ran,
// in every run.
func assertCertified(t *testing.T, out string, runs int) conformance.Certificate {
	t.Helper()
	var cert conformance.Certificate
	if err := json.Unmarshal([]byte(out), &cert); err != nil {
		t.Fatalf("not a certificate: %v\n%.500s", err, out)
	}
	if !cert.Passed || cert.ChecksRun == 0 || len(cert.Runs) != runs {
		t.Fatalf("passed %v, %d checks run, %d runs (want %d)\n%.3000s", cert.Passed, cert.ChecksRun, len(cert.Runs), runs, out)
	}
	for _, g := range cert.Guarantees {
		if g.Status != "pass" || g.Checks == 0 || g.Failed != 0 {
			t.Errorf("guarantee %s: %s, %d checks, %d failed", g.Group, g.Status, g.Checks, g.Failed)
		}
	}
	for _, r := range cert.Runs {
		perGroup := map[string]int{}
		for _, res := range cert.Results {
			if res.Variant == r.Variant && res.Status == conformance.Pass {
				perGroup[res.Group]++
			}
		}
		for _, g := range []string{conformance.GroupContract, conformance.GroupStateMachine, conformance.GroupLinearizability} {
			if perGroup[g] == 0 {
				t.Errorf("run %q: no %s check passed", r.Variant, g)
			}
		}
		if r.ChecksRun == 0 || r.Failed != 0 {
			t.Errorf("run %q: %d checks run, %d failed", r.Variant, r.ChecksRun, r.Failed)
		}
	}
	return cert
}

// One build of the binary, in the parent test's temporary directory,
// serves every subtest.
func TestCertifyBinary(t *testing.T) {
	bin := buildDeliverysim(t, t.TempDir())
	t.Run("Memory", func(t *testing.T) { certifyBinaryMemory(t, bin) })
	t.Run("Postgres", func(t *testing.T) { certifyBinaryPostgres(t, bin) })
	t.Run("RefusesUnknownOnly", func(t *testing.T) { certifyRefusesUnknownOnly(t, bin) })
	t.Run("OutsideStoreThroughMain", func(t *testing.T) { certifyOutsideStoreThroughMain(t, bin) })
}

func certifyBinaryMemory(t *testing.T, bin string) {
	code, out, errS := runBinary(t, nil, bin, "certify", "--backend", "memory", "--checks", "5", "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%.3000s", code, errS, out)
	}
	assertCertified(t, out, 1)
}

// DELIVERYSIM_REQUIRE_PG=1 (CI) turns a missing server into a failure.
func certifyBinaryPostgres(t *testing.T, bin string) {
	dsn := pgtest.DSN(t)
	junit := filepath.Join(t.TempDir(), "certify.xml")
	code, out, errS := runBinary(t, nil, bin, "certify", "--dsn", dsn, "--checks", "5", "--json", "--junit", junit)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%.3000s", code, errS, out)
	}
	cert := assertCertified(t, out, 2)
	for i, zone := range []string{"UTC", "America/New_York"} {
		r := cert.Runs[i]
		if r.Variant != "TimeZone="+zone || r.Server == nil || r.Server.TimeZone != zone || r.Server.Version == "" || r.Server.DefaultIsolation == "" {
			t.Errorf("run %d: %+v (server %+v); want time zone %s with the server's version and isolation", i, r, r.Server, zone)
		}
	}
	if data, err := os.ReadFile(junit); err != nil || !strings.Contains(string(data), `tests="`) {
		t.Errorf("JUnit report: %v\n%.300s", err, data)
	}
}

// A typo in --only used to run nothing and pass.
func certifyRefusesUnknownOnly(t *testing.T, bin string) {
	code, out, errS := runBinary(t, nil, bin, "certify", "--backend", "memory", "--only", "Contract,Nope", "--json")
	if code != 2 || out != "" {
		t.Fatalf("exit %d, stdout %q; want exit 2 and no report", code, out)
	}
	for _, want := range []string{`"Nope"`, "valid names", "StateMachine", "Contract/AckDeletesWhoeverHoldsIt", "Linearizability/Queue"} {
		if !strings.Contains(errS, want) {
			t.Errorf("stderr lacks %q: %s", want, errS)
		}
	}
	if strings.Count(strings.TrimSpace(errS), "\n") > 0 {
		t.Errorf("the error is not one line: %s", errS)
	}
}

// An outside store, built only from the public documents, certified by
// its own program through conformance.Main: the same report (every field
// of certify's), the same exit codes.
func certifyOutsideStoreThroughMain(t *testing.T, bin string) {
	outside := filepath.Join(t.TempDir(), "outside-store")
	if err := goBuild(outside, "../../examples/outside-store"); err != nil {
		t.Fatal(err)
	}
	junit := filepath.Join(t.TempDir(), "outside.xml")
	code, out, errS := runBinary(t, nil, outside, "--checks", "5", "--json", "--junit", junit)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%.3000s", code, errS, out)
	}
	cert := assertCertified(t, out, 1)
	if cert.Backend != "liststore" {
		t.Errorf("backend %q", cert.Backend)
	}
	if _, err := os.Stat(junit); err != nil {
		t.Errorf("--junit: %v", err)
	}
	code, ours, errS := runBinary(t, nil, bin, "certify", "--backend", "memory", "--checks", "5", "--json")
	if code != 0 {
		t.Fatalf("certify --backend memory: exit %d\n%s", code, errS)
	}
	if a, b := jsonShape(t, ours), jsonShape(t, out); a != b {
		t.Errorf("the outside store's report differs in shape from certify's:\ncertify: %s\noutside: %s", a, b)
	}
	if code, out, errS := runBinary(t, nil, outside, "--only", "Nope"); code != 2 || out != "" || !strings.Contains(errS, "valid names") {
		t.Errorf("--only Nope: exit %d, stdout %q, stderr %s", code, out, errS)
	}
}

// jsonShape is the set of field paths of a JSON document, with array
// elements merged ("results[].name"), sorted, as one string.
func jsonShape(t *testing.T, doc string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				paths[prefix+k] = true
				walk(prefix+k+".", e)
			}
		case []any:
			for _, e := range x {
				walk(strings.TrimSuffix(prefix, ".")+"[].", e)
			}
		}
	}
	walk("", v)
	var list []string
	for p := range paths {
		list = append(list, p)
	}
	slices.Sort(list)
	return strings.Join(list, " ")
}
