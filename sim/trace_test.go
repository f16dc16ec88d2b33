package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// A hash-only run (what a sweep does) hashes exactly the bytes a full run's
// trace text has: the same seed gives the same TraceHash and TraceLines
// either way, and that hash is the SHA-256 of TraceText.
func TestTraceHashOnlyMatchesTheFullTrace(t *testing.T) {
	for _, seed := range []uint64{1, 7, 13, 42} {
		full := mustRun(t, Config{Seed: seed})
		only := mustRun(t, Config{Seed: seed, TraceHashOnly: true})
		sum := sha256.Sum256(full.TraceText())
		if want := hex.EncodeToString(sum[:]); full.TraceHash != want {
			t.Fatalf("seed %d: TraceHash %s, sha256 of the text %s", seed, full.TraceHash, want)
		}
		if only.TraceHash != full.TraceHash || only.TraceLines != full.TraceLines || full.TraceLines != len(full.Trace) {
			t.Fatalf("seed %d: hash-only %s (%d lines), full %s (%d lines, %d records)", seed,
				only.TraceHash, only.TraceLines, full.TraceHash, full.TraceLines, len(full.Trace))
		}
		if only.Trace != nil {
			t.Fatalf("seed %d: a hash-only run kept %d records", seed, len(only.Trace))
		}
	}
}

// A run without a trace (Config.NoTrace, what a sweep without a
// determinism check does) gives everything else a hash-only run gives,
// verdicts above all, on the reference engine and on a known-bug variant
// that fails; only the hash is missing.
func TestNoTraceChangesNothingButTheTrace(t *testing.T) {
	for _, bugs := range []engine.Bugs{{}, {NoRequeueOnFailure: true}} {
		failed := false
		for _, seed := range []uint64{1, 7, 13, 42} {
			only := mustRun(t, Config{Seed: seed, Bugs: bugs, TraceHashOnly: true})
			none := mustRun(t, Config{Seed: seed, Bugs: bugs, NoTrace: true})
			if none.Trace != nil || none.TraceHash != "" {
				t.Fatalf("seed %d: a run without a trace kept %d records, hash %q", seed, len(none.Trace), none.TraceHash)
			}
			failed = failed || len(only.Violations) > 0
			none.TraceHash = only.TraceHash
			if !reflect.DeepEqual(none, only) {
				t.Fatalf("seed %d, bugs %+v: the run without a trace differs from the hash-only run", seed, bugs)
			}
		}
		if bugs != (engine.Bugs{}) && !failed {
			t.Fatalf("bugs %+v: no seed failed, so the verdicts compared were all empty", bugs)
		}
	}
}

// The strconv formatting of a record is byte for byte the fmt format it
// replaced, for every value kind a record holds and every quoting case.
func TestRecordFormatMatchesFmt(t *testing.T) {
	vals := []any{"", "plain", "a b", "a=b", `q"uote`, "tab\there", "new\nline", `back\slash`, "`tick", "ünï", "\x00",
		0, 7, -3, int64(1) << 40, uint64(1) << 63, true, false, 1500 * time.Millisecond, Epoch.Add(time.Nanosecond)}
	for _, step := range []int64{0, 1, 1234567, 12345678} {
		for _, d := range []time.Duration{0, time.Nanosecond, 3*time.Second + 5, 1000 * time.Hour} {
			for i, v := range vals {
				r := Record{Step: step, Time: Epoch.Add(d), Actor: "bot-1", Kind: "kind", Fields: kv("k", v, "n", i)}
				want := fmt.Sprintf("%07d %d.%09d %s %s", r.Step, int64(d/time.Second), int64(d%time.Second), r.Actor, r.Kind)
				for _, f := range r.Fields {
					want += " " + f.K + "=" + quoteIfNeeded(f.V)
				}
				if got := r.String(); got != want {
					t.Fatalf("String() = %q, want %q", got, want)
				}
				var th traceHasher
				th.rec(step, r.Time, r.Actor, r.Kind, []any{"k", v, "n", i})
				if got := string(th.buf); got != want+"\n" {
					t.Fatalf("hash-only line %q, want %q", got, want+"\n")
				}
			}
		}
	}
}

// needsQuote's one-pass ASCII test decides as its definition does, for
// every byte alone, inside a word and at either end, and for strings
// beyond ASCII.
func TestNeedsQuoteMatchesItsDefinition(t *testing.T) {
	vals := []string{"", "abc", "ünï", "a\u00a0b", "\ufeff", "x\xffy", "\u2028"}
	for b := 0; b < 256; b++ {
		c := string([]byte{byte(b)})
		vals = append(vals, c, "ab"+c, c+"ab", "a"+c+"b", "é"+c)
	}
	for _, v := range vals {
		if got, want := needsQuote(v), needsQuoteSlow(v); got != want {
			t.Errorf("needsQuote(%q) = %v, its definition says %v", v, got, want)
		}
	}
}

// posString is the fmt format it replaced.
func TestPosStringMatchesFmt(t *testing.T) {
	for _, p := range []impl.Position{{}, {Major: 1767225600123, Minor: 7}, {Major: -3, Minor: -1, ID: "ev-1"}, {Major: 5, ID: "a b"}} {
		want := fmt.Sprintf("%d.%d", p.Major, p.Minor)
		if p.ID != "" {
			want = fmt.Sprintf("%d.%d.%s", p.Major, p.Minor, p.ID)
		}
		if got := posString(p); got != want {
			t.Errorf("posString(%+v) = %q, want %q", p, got, want)
		}
	}
}
