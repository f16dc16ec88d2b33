package pgstore_test

// Postgres-specific behaviour of the store. The contract itself is checked,
// against the model and against memstore, in package conformance.

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// Byte order, not dictionary order: uppercase before lowercase, multi-byte
// UTF-8 after ASCII, a prefix before its extensions. A database collation
// would sort most of these differently.
var awkward = []string{"a", "B", "é", "z", "", "a b", "ab", "Z", "~", "a\u00a0", "ä"}

func TestPostgresOrderingIsBytewise(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)

	var cs []impl.Cursor
	var msgs []impl.Message
	for i, a := range awkward {
		cs = append(cs, impl.Cursor{Key: impl.CursorKey{Stream: a, Subscriber: awkward[len(awkward)-1-i]}, Pos: impl.Position{ID: a}, UpdatedAt: t0})
		for _, b := range awkward {
			// Equal CreatedAt for all: EventID decides the order within a subscriber.
			msgs = append(msgs, impl.Message{Subscriber: a, EventID: b, Stream: "s", CreatedAt: t0})
		}
	}
	if _, err := s.AdvanceCursors(ctx, cs); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListCursors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(got, func(a, b impl.Cursor) int { return strings.Compare(a.Key.Stream, b.Key.Stream) }) || len(got) != len(cs) {
		t.Errorf("ListCursors order is not Go's: %q", streamsOf(got))
	}

	if n, err := s.Enqueue(ctx, msgs); err != nil || n != len(msgs) {
		t.Fatalf("Enqueue = %d, %v; want %d", n, err, len(msgs))
	}
	listed, err := s.ListMessages(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(listed)
	slices.SortFunc(want, impl.QueueCompare)
	if !reflect.DeepEqual(listed, want) {
		t.Errorf("ListMessages is not in Go's QueueOrder")
	}
	claimed, err := s.Claim(ctx, impl.ClaimRequest{Owner: "w", Now: t0, Lease: time.Minute, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range claimed {
		if claimed[i].Key() != want[i].Key() {
			t.Errorf("Claim #%d = %q, want %q (the first in Go's QueueOrder)", i, claimed[i].Key(), want[i].Key())
		}
	}

	// The cursor guard compares IDs bytewise too: "é" is after "z" in Go.
	k := impl.CursorKey{Stream: "guard"}
	seq := []string{"B", "a", "Z", "z", "é", "ä"}
	for _, id := range seq {
		if _, err := s.AdvanceCursors(ctx, []impl.Cursor{{Key: k, Pos: impl.Position{ID: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	c, _, err := s.GetCursor(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if wantID := slices.Max(seq); c.Pos.ID != wantID {
		t.Errorf("cursor after %q = %q, want the Go maximum %q", seq, c.Pos.ID, wantID)
	}
}

func streamsOf(cs []impl.Cursor) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Key.Stream)
	}
	return out
}

func TestPostgresValuesReadBackExactly(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	paris := time.FixedZone("CET", 3600)
	at := time.Date(2025, 1, 2, 3, 4, 5, 987654321, paris) // not UTC, odd nanoseconds

	in := []impl.Cursor{
		{Key: impl.CursorKey{Stream: "nil-token"}, Pos: impl.Position{Major: -5, Minor: 1<<62 + 3, ID: "x"}, UpdatedAt: at},
		{Key: impl.CursorKey{Stream: "empty-token"}, Token: []byte{}, UpdatedAt: at},
		{Key: impl.CursorKey{Stream: "token", Subscriber: "bot"}, Token: []byte{0, 1, 0xff}},
	}
	if _, err := s.AdvanceCursors(ctx, in); err != nil {
		t.Fatal(err)
	}
	for _, c := range in {
		got, ok, err := s.GetCursor(ctx, c.Key)
		if err != nil || !ok {
			t.Fatalf("GetCursor(%v) = %v, %v", c.Key, ok, err)
		}
		want := c
		want.UpdatedAt = impl.TimeOf(impl.NanosOf(c.UpdatedAt))
		if len(want.Token) == 0 {
			want.Token = nil
		}
		if !reflect.DeepEqual(got, want) || got.UpdatedAt != want.UpdatedAt {
			t.Errorf("GetCursor(%v)\n got %#v\nwant %#v", c.Key, got, want)
		}
	}

	msg := impl.Message{Subscriber: "bot", EventID: "e1", Stream: "s", Pos: impl.Position{Major: 1, Minor: 2, ID: "e1"}, Payload: []byte{}, CreatedAt: at,
		// Ignored on input: only the identity, position, payload and CreatedAt are read.
		Attempts: 9, LeaseOwner: "x", Dead: true, LastError: "x", NextAttemptAt: at.Add(time.Hour), LeaseUntil: at.Add(time.Hour)}
	if _, err := s.Enqueue(ctx, []impl.Message{msg}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListMessages(ctx, "bot")
	if err != nil {
		t.Fatal(err)
	}
	created := impl.TimeOf(impl.NanosOf(at))
	want := []impl.Message{{Subscriber: "bot", EventID: "e1", Stream: "s", Pos: msg.Pos, CreatedAt: created, NextAttemptAt: created}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListMessages\n got %#v\nwant %#v", got, want)
	}
}

func TestPostgresEmptyResultsAreNil(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	cs, err := s.ListCursors(ctx)
	check(t, err)
	ms, err := s.ListMessages(ctx, "")
	check(t, err)
	claimed, err := s.Claim(ctx, impl.ClaimRequest{Owner: "w", Now: t0, Limit: 10})
	check(t, err)
	items, err := s.GetDelivered(ctx, "app", "src")
	check(t, err)
	written, err := s.AdvanceCursors(ctx, nil)
	check(t, err)
	if cs != nil || ms != nil || claimed != nil || items != nil || written != nil {
		t.Errorf("empty results should be nil: %#v %#v %#v %#v %#v", cs, ms, claimed, items, written)
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A repeated key takes the batch path, where every entry must see the ones
// before it; distinct keys take the single-statement path. Both must agree
// with sequential application.
func TestPostgresAdvanceCursorsWithinOneCall(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	k, j := impl.CursorKey{Stream: "k"}, impl.CursorKey{Stream: "j"}
	at := func(major int64, tok string) impl.Cursor {
		return impl.Cursor{Key: k, Pos: impl.Position{Major: major}, Token: []byte(tok), UpdatedAt: t0.Add(time.Duration(major))}
	}
	if _, err := s.AdvanceCursors(ctx, []impl.Cursor{at(4, "four")}); err != nil {
		t.Fatal(err)
	}
	jc := impl.Cursor{Key: j, Pos: impl.Position{Major: 1}}
	got, err := s.AdvanceCursors(ctx, []impl.Cursor{at(5, "five"), at(3, "three"), at(7, "seven"), jc, at(7, "seven again"), at(6, "six")})
	check(t, err)
	if want := []bool{true, false, true, true, false, false}; !reflect.DeepEqual(got, want) {
		t.Errorf("AdvanceCursors = %v, want %v", got, want)
	}
	c, _, err := s.GetCursor(ctx, k)
	check(t, err)
	if c.Pos.Major != 7 || string(c.Token) != "seven" {
		t.Errorf("cursor = %d %q, want 7 %q (the first entry that reached 7)", c.Pos.Major, c.Token, "seven")
	}

	got, err = s.AdvanceCursors(ctx, []impl.Cursor{at(6, "x"), {Key: j, Pos: impl.Position{Major: 2}}, {Key: impl.CursorKey{Stream: "new"}}})
	check(t, err)
	if want := []bool{false, true, true}; !reflect.DeepEqual(got, want) {
		t.Errorf("AdvanceCursors (distinct keys) = %v, want %v", got, want)
	}
}

// The store leans on pgx sending a batch as one pipeline with one Sync, so
// the statements share an implicit transaction. If a pgx upgrade changed
// that, a failed batch would leave half its writes behind.
func TestPostgresBatchIsOneTransaction(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStore(t, dsn, schema, pgstore.Options{})
	cfg, err := pgxpool.ParseConfig(dsn)
	check(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	check(t, err)
	defer pool.Close()

	b := &pgx.Batch{}
	b.Queue(`INSERT INTO cursors (stream, subscriber, pos_major, pos_minor, pos_id, updated_at) VALUES ('half', '', 1, 0, '', 0)`)
	b.Queue(`SELECT 1 / (SELECT count(*) FROM cursors WHERE stream = 'nope')`)
	if err := pool.SendBatch(ctx, b).Close(); err == nil {
		t.Fatal("the batch's division by zero did not fail")
	}
	if _, ok, err := s.GetCursor(ctx, impl.CursorKey{Stream: "half"}); err != nil || ok {
		t.Errorf("the first statement of a failed batch was committed (found=%v, err=%v)", ok, err)
	}
}

func TestPostgresRefusesTextPostgresCannotStore(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	for _, bad := range []string{"nul\x00byte", "bad\xffutf8"} {
		_, err := s.Enqueue(ctx, []impl.Message{{Subscriber: bad, EventID: "e"}})
		if err == nil {
			t.Fatalf("Enqueue accepted subscriber %q", bad)
		}
		if errors.Is(err, impl.ErrAmbiguous) {
			t.Errorf("a refused input is reported as ambiguous: %v", err)
		}
		if _, err := s.AdvanceCursors(ctx, []impl.Cursor{{Key: impl.CursorKey{Stream: bad}}}); err == nil {
			t.Errorf("AdvanceCursors accepted stream %q", bad)
		}
	}
	if ms, err := s.ListMessages(ctx, ""); err != nil || ms != nil {
		t.Errorf("after refused writes ListMessages = %v, %v; want nothing", ms, err)
	}
}

func TestPostgresOpenWithoutMigrateNeedsMigratedSchema(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	_, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema})
	if !errors.Is(err, pgstore.ErrSchemaNotMigrated) {
		t.Fatalf("Open on an empty schema without Migrate: got %v, want ErrSchemaNotMigrated", err)
	}
	check(t, pgstore.Migrate(ctx, dsn, schema))
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema})
	check(t, err)
	s.Close()
}

// The server's default collation may well be C.UTF-8 (bytewise already), in
// which case the ordering test above cannot tell; the catalog can.
func TestPostgresIdentifierColumnsAreCollateC(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	pgtest.OpenStore(t, dsn, schema, pgstore.Options{})
	conn, err := pgx.Connect(ctx, dsn)
	check(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name || '.' || column_name, coalesce(collation_name, '')
		FROM information_schema.columns
		WHERE table_schema = $1 AND data_type = 'text' AND column_name NOT IN ('last_error', 'version')
		ORDER BY 1`, schema)
	check(t, err)
	type column struct{ Name, Collation string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.Name, &c.Collation)
		return c, err
	})
	check(t, err)
	if len(cols) < 10 {
		t.Fatalf("found only %d identifier columns: %v", len(cols), cols)
	}
	for _, c := range cols {
		if c.Collation != "C" {
			t.Errorf("%s has collation %q, want \"C\" (bytewise, like Go)", c.Name, c.Collation)
		}
	}
}

func TestPostgresEnqueueLeased(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	msg := func(sub, ev string, created time.Duration, owner string, until time.Duration) impl.Message {
		m := impl.Message{Subscriber: sub, EventID: ev, Stream: "s", Pos: impl.Position{Major: 1, ID: ev}, Payload: []byte(ev), CreatedAt: t0.Add(created)}
		if owner != "" || until != 0 {
			m.LeaseOwner, m.LeaseUntil = owner, t0.Add(until)
		}
		return m
	}
	if _, err := s.Enqueue(ctx, []impl.Message{msg("bot", "old", 0, "", 0)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.EnqueueLeased(ctx, []impl.Message{
		msg("bot", "old", time.Second, "n1", time.Minute), // present already: untouched
		msg("bot", "e2", 2*time.Second, "n1", time.Minute),
		msg("bot", "e1", 2*time.Second, "", time.Minute), // no owner: a plain enqueue, LeaseUntil ignored
		msg("bot", "e2", 3*time.Second, "n2", time.Hour), // repeated key: the first entry wins
		msg("Bot", "e3", time.Second, "n2", time.Hour),
	})
	check(t, err)
	if want := []bool{false, true, true, false, true}; !reflect.DeepEqual(got, want) {
		t.Errorf("EnqueueLeased inserted %v, want %v", got, want)
	}
	queued := func(m impl.Message) impl.Message {
		m.CreatedAt = impl.TimeOf(impl.NanosOf(m.CreatedAt))
		m.NextAttemptAt = m.CreatedAt
		if m.LeaseOwner == "" {
			m.LeaseUntil = time.Time{}
		} else {
			m.LeaseUntil = impl.TimeOf(impl.NanosOf(m.LeaseUntil))
		}
		return m
	}
	want := []impl.Message{
		queued(msg("Bot", "e3", time.Second, "n2", time.Hour)),
		queued(msg("bot", "old", 0, "", 0)),
		queued(msg("bot", "e1", 2*time.Second, "", 0)),
		queued(msg("bot", "e2", 2*time.Second, "n1", time.Minute)),
	}
	all, err := s.ListMessages(ctx, "")
	check(t, err)
	if !reflect.DeepEqual(all, want) {
		t.Errorf("after EnqueueLeased:\n got %+v\nwant %+v", all, want)
	}
	// The leases are real: a claim before they end passes those messages by.
	claimed, err := s.Claim(ctx, impl.ClaimRequest{Owner: "n3", Now: t0.Add(10 * time.Second), Lease: time.Second, Limit: 10})
	check(t, err)
	var keys []impl.MessageKey
	for _, m := range claimed {
		keys = append(keys, m.Key())
	}
	if wantKeys := []impl.MessageKey{{Subscriber: "bot", EventID: "old"}, {Subscriber: "bot", EventID: "e1"}}; !reflect.DeepEqual(keys, wantKeys) {
		t.Errorf("Claim took %v, want %v", keys, wantKeys)
	}
}

// copyBatch is n messages for the COPY path, with the values its binary
// encoding must carry exactly: awkward and empty strings, extreme
// positions, empty, nil and binary payloads. Every third is leased when
// leased is set.
func copyBatch(prefix string, n int, leased bool) []impl.Message {
	ms := make([]impl.Message, n)
	for i := range ms {
		a := awkward[i%len(awkward)]
		m := impl.Message{Subscriber: "bot" + a, EventID: prefix + a + "\t\\\n" + string(rune('a'+i%26)) + strings.Repeat("é", i%3),
			Stream: a, Pos: impl.Position{Major: int64(i) - 50, Minor: 1<<62 + int64(i), ID: a},
			Payload: []byte{0, byte(i), 0xff, '\\', '\t'}, CreatedAt: t0.Add(time.Duration(i%7) * time.Nanosecond)}
		switch i % 5 {
		case 1:
			m.Payload = nil
		case 2:
			m.Payload = []byte{}
		}
		if leased && i%3 == 0 {
			m.LeaseOwner, m.LeaseUntil = "node"+a, t0.Add(time.Duration(i)*time.Second)
		}
		ms[i] = m
	}
	return ms
}

// The COPY attempt inserts a batch of new keys exactly as the INSERT
// would, and a batch with a present key not at all.
func TestPostgresCopyAllOrNothing(t *testing.T) {
	ctx := context.Background()
	s := pgtest.NewStore(t)
	batch := copyBatch("e", 40, true)
	copied, err := s.CopyOnly(ctx, batch, true)
	if err != nil || !copied {
		t.Fatalf("COPY of new keys: copied %v, %v", copied, err)
	}
	viaCopy, err := s.ListMessages(ctx, "")
	check(t, err)

	ref := pgtest.NewStore(t) // same rows through the ON CONFLICT statement
	ref.SetCopyMinRows(1 << 30)
	if _, err := ref.EnqueueLeased(ctx, batch); err != nil {
		t.Fatal(err)
	}
	viaInsert, err := ref.ListMessages(ctx, "")
	check(t, err)
	if len(viaCopy) != len(batch) || !reflect.DeepEqual(viaCopy, viaInsert) {
		t.Fatalf("COPY stored\n%+v\nthe INSERT stores\n%+v", viaCopy, viaInsert)
	}

	clash := append(copyBatch("f", 40, false), batch[39]) // one present key
	copied, err = s.CopyOnly(ctx, clash, false)
	if err != nil || copied {
		t.Fatalf("COPY with a present key: copied %v, %v; want false and no error", copied, err)
	}
	after, err := s.ListMessages(ctx, "")
	check(t, err)
	if !reflect.DeepEqual(after, viaCopy) {
		t.Errorf("a COPY that hit a present key left %d messages, want the %d before it", len(after), len(viaCopy))
	}
}

// Batches large enough to go by COPY give memstore's results, whether all
// their keys are new (COPY) or some are present (COPY fails, the ON
// CONFLICT statement runs), with repeated keys inside a batch.
func TestPostgresEnqueueByCopyMatchesMemstore(t *testing.T) {
	ctx := context.Background()
	pg, mem := pgtest.NewStore(t), memstore.New()
	defer mem.Close()
	fresh := copyBatch("a", 100, false)
	leased := copyBatch("b", 100, true)
	for _, m := range leased[:10] { // ten repeats, different but for the key: the first must win
		m.Payload, m.CreatedAt, m.LeaseOwner, m.LeaseUntil = []byte("second"), t0.Add(time.Hour), "other", t0.Add(time.Hour)
		leased = append(leased, m)
	}
	mixed := append(copyBatch("c", 60, true), fresh[20:50]...) // thirty present
	plain := append(copyBatch("d", 50, false), leased[:40]...)
	steps := []struct {
		name   string
		leased bool
		msgs   []impl.Message
	}{{"Enqueue new", false, fresh}, {"EnqueueLeased new with repeats", true, leased},
		{"EnqueueLeased some present", true, mixed}, {"Enqueue some present", false, plain}}
	for _, st := range steps {
		var want, got any
		var werr, gerr error
		if st.leased {
			want, werr = mem.EnqueueLeased(ctx, st.msgs)
			got, gerr = pg.EnqueueLeased(ctx, st.msgs)
		} else {
			want, werr = mem.Enqueue(ctx, st.msgs)
			got, gerr = pg.Enqueue(ctx, st.msgs)
		}
		if werr != nil || gerr != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: pgstore %v, %v; memstore %v, %v", st.name, got, gerr, want, werr)
		}
		wantList, _ := mem.ListMessages(ctx, "")
		gotList, err := pg.ListMessages(ctx, "")
		check(t, err)
		if !reflect.DeepEqual(gotList, wantList) {
			t.Fatalf("%s: pgstore holds\n%+v\nmemstore\n%+v", st.name, gotList, wantList)
		}
	}
}

// The whole contract, state machine and linearizability suite with every
// batch, however small, tried by COPY first and every hand-off's acks
// deleted by the guarded range scan: the suite's batches of one to three
// messages otherwise take the INSERT and the per-key probes alone, and its
// concurrent clients are what race a COPY against another insert of the
// same key, and a range delete against writers in its range.
func TestPostgresConformanceThroughCopy(t *testing.T) {
	stores := pgtest.NewStores(t)
	conformance.Run(t, conformance.Factory{
		Name: "pgstore-copy",
		New: func(tb testing.TB) impl.Store {
			s := stores.New(tb) // from this test's own pool: none goes back to another test
			s.SetCopyMinRows(1)
			s.SetRangeMinKeys(1)
			return s
		},
		Features: conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true},
	}, conformance.ArtifactsDir(t.TempDir()))
}
