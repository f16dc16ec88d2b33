package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/internal/pgtest"
	"github.com/deliverysim/deliverysim/runtime/chaos"
)

// Issue 37: a negative count was taken silently (as the default the -1
// sentinel stands for). Each is refused with one line and exit 2, by the
// built binary, before any database is needed.
func TestChaosRefusesNegativeCounts(t *testing.T) {
	bin := builtCLI(t)
	for _, c := range [][]string{{"--kills", "-3"}, {"--db-cuts", "-2"}, {"--bot-faults", "-1"}} {
		cmd := exec.Command(bin, append([]string{"chaos", "--duration", "5s"}, c...)...)
		cmd.Dir = t.TempDir()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c[0]+" "+c[1]+": use 0 or more") {
			t.Errorf("chaos %v: exit %d (err %v), stderr %q; want exit 2 and one line naming %s", c, code, err, stderr.String(), c[0])
		}
	}
}

// fakeEngine is an engine command that runs no deliveries (the tests
// below look only at the plan and at which engine ran): it serves 404 on
// --listen, so the harness knows at once there is no observation
// endpoint, and exits 0 on SIGTERM.
func fakeEngine(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is needed for the stand-in engine")
	}
	p := filepath.Join(t.TempDir(), name)
	src := `#!/usr/bin/env python3
import signal, sys, http.server
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
host, port = sys.argv[sys.argv.index("--listen") + 1].rsplit(":", 1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer((host, int(port)), H).serve_forever()
`
	if err := os.WriteFile(p, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The implementer's loop, through the built binary run outside a checkout:
// the printed rerun line names the binary as deliverysim, holds every flag
// that shaped the plan and gives the identical plan; --replay runs the
// report's own engine (it used to start the reference engine), and an
// --engine-cmd given beside it wins.
func TestChaosRerunAndReplayKeepThePlanAndTheEngine(t *testing.T) {
	dsn := pgtest.DSN(t)
	bin := builtCLI(t)
	engA, engB := fakeEngine(t, "engine-a"), fakeEngine(t, "engine-b")
	dir := t.TempDir()
	chaosJSON := func(args ...string) (chaos.Report, []byte) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"chaos", "--json"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "DELIVERYSIM_PG_DSN="+dsn)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
			t.Fatalf("chaos %v: %v\n%s", args, err, stderr.String())
		}
		var rep chaos.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("chaos %v: stdout is not a report: %v\n%s", args, err, stderr.String())
		}
		return rep, out
	}
	orig, raw := chaosJSON("--seed", "4242", "--duration", "3s", "--kills", "1", "--db-cuts", "2", "--bot-faults", "5",
		"--settle", "1s", "--faults", "crash,store-ambiguous,store-error,webhook-5xx,webhook-refused", "--max-attempts", "5",
		"--rate", "7", "--engine-cmd", engA)
	if len(orig.Schedule) == 0 || !reflect.DeepEqual(orig.Engine, []string{engA}) {
		t.Fatalf("first run: plan %v, engine %v", orig.Schedule, orig.Engine)
	}
	for _, want := range []string{"deliverysim chaos ", "--seed 4242", "--duration 3s", "--kills 1", "--db-cuts 2", "--bot-faults 5",
		"--settle 1s", "--faults crash,store-ambiguous,store-error,webhook-5xx,webhook-refused", "--max-attempts 5", "--rate 7", "--engine-cmd " + engA} {
		if !strings.Contains(orig.Rerun, want) {
			t.Errorf("rerun line %q lacks %q", orig.Rerun, want)
		}
	}
	if !strings.HasPrefix(orig.Rerun, "deliverysim chaos ") {
		t.Errorf("outside a checkout the rerun line must start with the binary's name: %q", orig.Rerun)
	}

	// The printed line, run as printed (with this build as deliverysim).
	line := strings.Fields(strings.TrimPrefix(orig.Rerun, "deliverysim chaos "))
	again, _ := chaosJSON(line...)
	if !reflect.DeepEqual(again.Schedule, orig.Schedule) || !reflect.DeepEqual(again.Engine, orig.Engine) {
		t.Errorf("the rerun line gave plan %v with engine %v; the report had %v with %v", again.Schedule, again.Engine, orig.Schedule, orig.Engine)
	}

	report := filepath.Join(dir, "report.json")
	if err := os.WriteFile(report, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	replayed, _ := chaosJSON("--replay", report)
	if !reflect.DeepEqual(replayed.Engine, []string{engA}) || !reflect.DeepEqual(replayed.Schedule, orig.Schedule) {
		t.Errorf("--replay ran %v with plan %v; want the report's engine %v and plan %v", replayed.Engine, replayed.Schedule, engA, orig.Schedule)
	}
	beside, _ := chaosJSON("--replay", report, "--engine-cmd", engB)
	if !reflect.DeepEqual(beside.Engine, []string{engB}) || !reflect.DeepEqual(beside.Schedule, orig.Schedule) {
		t.Errorf("--replay with --engine-cmd beside ran %v; want %v, same plan", beside.Engine, engB)
	}
}
