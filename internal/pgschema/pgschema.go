// Package pgschema names the throwaway PostgreSQL schemas the project
// creates (a run's store, a test's, a benchmark's) and removes the ones
// left behind.
//
// Every such schema is called dsim_<kind>_<created>_<pid>_<seq>_<random>[_<label>]:
// the project prefix, what made it, its creation time (Unix seconds, UTC),
// the creating process and a counter and random bytes to keep it unique,
// and for tests a readable label (the test's name). A schema a process
// forgot to drop (killed by SIGKILL, a crashed test binary) can then be
// recognised and its age known without any bookkeeping table: GC drops
// those of the project older than a threshold, and nothing else.
package pgschema

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Prefix starts every schema name this package makes.
const Prefix = "dsim_"

// The kinds of creator.
const (
	KindRun   = "run"   // deliverysim run/sweep on --backend postgres
	KindTest  = "test"  // internal/pgtest
	KindBench = "bench" // bench replay
	KindCert  = "cert"  // deliverysim certify
)

var seq atomic.Uint64

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// Name returns a fresh schema name for kind, created now. label, if not
// empty, is appended in a readable form (cut to fit PostgreSQL's 63-byte
// identifiers).
func Name(kind, label string, now time.Time) string {
	var r [3]byte
	_, _ = rand.Read(r[:])
	s := fmt.Sprintf("%s%s_%d_%d_%d_%s", Prefix, kind, now.Unix(), os.Getpid(), seq.Add(1), hex.EncodeToString(r[:]))
	label = strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(label), "_"), "_")
	if room := 63 - len(s) - 1; label != "" && room > 0 {
		if len(label) > room {
			label = label[:room]
		}
		s += "_" + label
	}
	return s
}

// Parse reads a name Name made: its kind and creation time.
func Parse(name string) (kind string, created time.Time, ok bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return "", time.Time{}, false
	}
	parts := strings.SplitN(rest, "_", 6)
	if len(parts) < 5 {
		return "", time.Time{}, false
	}
	switch parts[0] {
	case KindRun, KindTest, KindBench, KindCert:
	default:
		return "", time.Time{}, false
	}
	secs, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || secs < 0 {
		return "", time.Time{}, false
	}
	return parts[0], time.Unix(secs, 0).UTC(), true
}

// Legacy names: what the project called its throwaway schemas before this
// package, with no creation time in them. Each pattern is the exact shape
// its maker produced (kept in git history), not a loose prefix: a t_ or
// bench_ schema of someone else's is not touched unless it has that whole
// shape. They are all at least as old as this package, so GC treats their
// age as unknown and old.
var legacy = []struct {
	kind string
	re   *regexp.Regexp
}{
	// internal/pgtest: t_<test name>_<pid>_<seq>_<3 random bytes>.
	{"legacy-test", regexp.MustCompile(`^t_[a-z0-9_]*_[0-9]+_[0-9]+_[0-9a-f]{6}$`)},
	// bench replay: bench_<pid>_<4 random bytes>.
	{"legacy-bench", regexp.MustCompile(`^bench_[0-9]+_[0-9a-f]{8}$`)},
	// run/sweep --backend postgres: dsim_<seed>_<pid>_<seq>_<3 random bytes>.
	{"legacy-run", regexp.MustCompile(`^dsim_[0-9]+_[0-9]+_[0-9]+_[0-9a-f]{6}$`)},
}

// ParseLegacy tells whether name has the shape of a schema the project made
// before this package, and which maker's.
func ParseLegacy(name string) (kind string, ok bool) {
	for _, l := range legacy {
		if l.re.MatchString(name) {
			return l.kind, true
		}
	}
	return "", false
}

// Orphan is a project schema GC found.
type Orphan struct {
	Schema  string    `json:"schema"`
	Kind    string    `json:"kind"`
	Created time.Time `json:"created"` // zero for a legacy name
	Legacy  bool      `json:"legacy"`  // an old-style name (ParseLegacy), age unknown
	Dropped bool      `json:"dropped"`
	Error   string    `json:"error,omitempty"`
}

// GCOptions say which schemas GC removes.
type GCOptions struct {
	// Prefix narrows the project prefix (e.g. "dsim_test_"); it must start
	// with Prefix. Empty means Prefix.
	Prefix string
	// OlderThan: only schemas created at least this long before Now.
	OlderThan time.Duration
	Now       time.Time
	DryRun    bool // list, do not drop
	// Legacy also collects old-style names (ParseLegacy), whatever
	// OlderThan says: their age is unknown. Only with the whole project
	// prefix (Prefix empty or equal to Prefix).
	Legacy bool
}

// GC drops the project's schemas matching opts and returns them (sorted by
// name). Schemas whose names neither Parse nor (with opts.Legacy)
// ParseLegacy reads are never touched.
func GC(ctx context.Context, dsn string, opts GCOptions) ([]Orphan, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = Prefix
	}
	if !strings.HasPrefix(prefix, Prefix) {
		return nil, fmt.Errorf("prefix %q does not start with %q; only the project's schemas can be collected", prefix, Prefix)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	legacyToo := opts.Legacy && prefix == Prefix
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace
		WHERE starts_with(nspname, $1) OR ($2 AND (starts_with(nspname, 't_') OR starts_with(nspname, 'bench_')))
		ORDER BY nspname`, prefix, legacyToo)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []Orphan
	for _, n := range names {
		var o Orphan
		if kind, created, ok := Parse(n); ok {
			if opts.Now.Sub(created) < opts.OlderThan {
				continue
			}
			o = Orphan{Schema: n, Kind: kind, Created: created}
		} else if kind, ok := ParseLegacy(n); ok && legacyToo {
			o = Orphan{Schema: n, Kind: kind, Legacy: true}
		} else {
			continue
		}
		if !opts.DryRun {
			if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
				o.Error = err.Error()
			} else {
				o.Dropped = true
			}
		}
		out = append(out, o)
	}
	return out, nil
}
