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
// shape. Their age is unknown, so GC collects them only when asked
// (GCOptions.Legacy) and measures their age from the first gc that saw
// them.
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
	// FirstSeen is, for a legacy name, when a gc first saw it (recorded in
	// the schema's comment): the age GC judges it by.
	FirstSeen time.Time `json:"first_seen,omitzero"`
	Dropped   bool      `json:"dropped"`
	// Kept says why a legacy schema found was not dropped (first seen too
	// recently).
	Kept  string `json:"kept,omitempty"`
	Error string `json:"error,omitempty"`
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
	// Legacy also collects old-style names (ParseLegacy). Their names hold
	// no creation time, and on a shared database one may belong to an old
	// checkout running right now, so their age is measured from the first
	// gc that saw them: GC records that instant in the schema's comment
	// and drops the schema only once it is OlderThan old. A legacy-shaped
	// schema carrying a comment of someone else's is not touched. Only
	// with the whole project prefix (Prefix empty or equal to Prefix).
	Legacy bool
}

// Bounds on GC's talk with the server: a server that accepts connections
// and never answers must not hang the command.
const (
	ConnectTimeout   = 10 * time.Second
	StatementTimeout = 30 * time.Second
)

// firstSeenTag starts the comment GC puts on a legacy schema.
const firstSeenTag = "deliverysim gc: first seen "

// Connect opens a connection whose setup is bounded by ConnectTimeout.
func Connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout <= 0 || cfg.ConnectTimeout > ConnectTimeout {
		cfg.ConnectTimeout = ConnectTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

// GC drops the project's schemas matching opts and returns them (sorted by
// name). Schemas whose names neither Parse nor (with opts.Legacy)
// ParseLegacy reads are never touched. Each statement is bounded by
// StatementTimeout. On an error (a cancelled ctx included) it returns what
// it did before it, with the error.
func GC(ctx context.Context, dsn string, opts GCOptions) ([]Orphan, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = Prefix
	}
	if !strings.HasPrefix(prefix, Prefix) {
		return nil, fmt.Errorf("prefix %q does not start with %q; only the project's schemas can be collected", prefix, Prefix)
	}
	conn, err := Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	legacyToo := opts.Legacy && prefix == Prefix
	type found struct {
		name    string
		comment *string
	}
	var names []found
	err = bounded(ctx, func(ctx context.Context) error {
		rows, err := conn.Query(ctx, `SELECT nspname, obj_description(oid, 'pg_namespace') FROM pg_namespace
		WHERE starts_with(nspname, $1) OR ($2 AND (starts_with(nspname, 't_') OR starts_with(nspname, 'bench_')))
		ORDER BY nspname`, prefix, legacyToo)
		if err != nil {
			return err
		}
		names, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (found, error) {
			var f found
			return f, r.Scan(&f.name, &f.comment)
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []Orphan
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		var o Orphan
		if kind, created, ok := Parse(n.name); ok {
			if opts.Now.Sub(created) < opts.OlderThan {
				continue
			}
			o = Orphan{Schema: n.name, Kind: kind, Created: created}
		} else if kind, ok := ParseLegacy(n.name); ok && legacyToo {
			o = Orphan{Schema: n.name, Kind: kind, Legacy: true}
			seen, ours := firstSeen(n.comment)
			if !ours {
				continue // someone else's comment: not a schema the project left
			}
			if seen.IsZero() {
				seen = opts.Now.UTC().Truncate(time.Second)
				if !opts.DryRun {
					tag := firstSeenTag + seen.Format(time.RFC3339)
					if err := bounded(ctx, func(ctx context.Context) error {
						_, err := conn.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{n.name}.Sanitize()+" IS "+quoteLiteral(tag))
						return err
					}); err != nil {
						o.Error = "cannot record when gc first saw it: " + err.Error()
						out = append(out, o)
						continue
					}
				}
			}
			o.FirstSeen = seen
			if age := opts.Now.Sub(seen); age < opts.OlderThan {
				o.Kept = fmt.Sprintf("an old-style name first seen %s ago; a gc at least %v after %s drops it",
					age.Round(time.Second), opts.OlderThan, seen.Format(time.RFC3339))
				out = append(out, o)
				continue
			}
		} else {
			continue
		}
		if !opts.DryRun {
			if err := bounded(ctx, func(ctx context.Context) error {
				_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n.name}.Sanitize()+" CASCADE")
				return err
			}); err != nil {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				o.Error = err.Error()
			} else {
				o.Dropped = true
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// bounded runs f under StatementTimeout.
func bounded(ctx context.Context, f func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, StatementTimeout)
	defer cancel()
	return f(sctx)
}

// firstSeen reads GC's tag from a schema comment: the instant (zero if
// there is no comment) and whether the comment is GC's (or absent).
func firstSeen(comment *string) (time.Time, bool) {
	if comment == nil || *comment == "" {
		return time.Time{}, true
	}
	rest, ok := strings.CutPrefix(*comment, firstSeenTag)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, rest)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
