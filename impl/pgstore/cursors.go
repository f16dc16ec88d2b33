package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
)

const cursorCols = "stream, subscriber, pos_major, pos_minor, pos_id, token, updated_at"

// The guard is a row comparison on C-collated columns: exactly
// impl.Position.Compare, so a cursor never moves backwards.
const advanceGuard = `
ON CONFLICT (stream, subscriber) DO UPDATE SET
    pos_major = EXCLUDED.pos_major, pos_minor = EXCLUDED.pos_minor, pos_id = EXCLUDED.pos_id,
    token = EXCLUDED.token, updated_at = EXCLUDED.updated_at
WHERE (c.pos_major, c.pos_minor, c.pos_id) < (EXCLUDED.pos_major, EXCLUDED.pos_minor, EXCLUDED.pos_id)`

const advanceManySQL = `INSERT INTO cursors AS c (` + cursorCols + `)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bytea[], $7::bigint[])` +
	advanceGuard + `
RETURNING c.stream, c.subscriber`

const advanceOneSQL = `INSERT INTO cursors AS c (` + cursorCols + `)
VALUES ($1, $2, $3, $4, $5, $6, $7)` + advanceGuard + `
RETURNING true`

const putBlindSQL = `INSERT INTO cursors AS c (` + cursorCols + `)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (stream, subscriber) DO UPDATE SET
    pos_major = EXCLUDED.pos_major, pos_minor = EXCLUDED.pos_minor, pos_id = EXCLUDED.pos_id,
    token = EXCLUDED.token, updated_at = EXCLUDED.updated_at`

func scanCursor(row pgx.Row) (impl.Cursor, error) {
	var c impl.Cursor
	var updated int64
	err := row.Scan(&c.Key.Stream, &c.Key.Subscriber, &c.Pos.Major, &c.Pos.Minor, &c.Pos.ID, &c.Token, &updated)
	c.UpdatedAt = impl.TimeOf(updated)
	return c, err
}

func checkCursor(c impl.Cursor) error {
	return checkText("cursor", c.Key.Stream, c.Key.Subscriber, c.Pos.ID)
}

const (
	getCursorSQL   = "SELECT " + cursorCols + " FROM cursors WHERE stream = $1 AND subscriber = $2"
	listCursorsSQL = "SELECT " + cursorCols + " FROM cursors ORDER BY stream, subscriber"
)

// GetCursor implements impl.Store.
func (s *Store) GetCursor(ctx context.Context, key impl.CursorKey) (impl.Cursor, bool, error) {
	if err := checkText("cursor key", key.Stream, key.Subscriber); err != nil {
		return impl.Cursor{}, false, classify("get cursor", false, err)
	}
	return queryOne(ctx, s, "get cursor", false, scanCursor, getCursorSQL, key.Stream, key.Subscriber)
}

// ListCursors implements impl.Store. No cursors gives nil.
func (s *Store) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	return queryAll(ctx, s, "list cursors", false, scanCursor, listCursorsSQL)
}

// AdvanceCursors implements impl.Store. An empty cs gives nil results.
//
// With distinct keys (the engine's case) it is one multi-row conditional
// upsert. When a key repeats, each entry must see the ones before it, which
// one statement cannot do (ON CONFLICT may touch a row only once), so the
// entries go as one pipelined batch of single-row upserts instead: still one
// round trip and one implicit transaction.
func (s *Store) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	a, err := newCursorAdvance(cs)
	if err != nil {
		return nil, classify("advance cursors", true, err)
	}
	written := make([]bool, len(cs))
	err = s.do(ctx, "advance cursors", true, func(ctx context.Context, q querier) error {
		return a.run(ctx, q, written)
	})
	if err != nil {
		return nil, err
	}
	return written, nil
}

// cursorAdvance is an AdvanceCursors call checked and put in write order.
type cursorAdvance struct {
	cs     []impl.Cursor
	order  []int
	unique bool
}

func newCursorAdvance(cs []impl.Cursor) (*cursorAdvance, error) {
	for _, c := range cs {
		if err := checkCursor(c); err != nil {
			return nil, err
		}
	}
	// Writing in key order makes concurrent callers take row locks in one
	// order, so they cannot deadlock; entries of one key keep their order.
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareKeys(cs[a].Key, cs[b].Key) })
	unique := true
	for i := 1; i < len(order); i++ {
		if cs[order[i-1]].Key == cs[order[i]].Key {
			unique = false
			break
		}
	}
	return &cursorAdvance{cs: cs, order: order, unique: unique}, nil
}

// run sends the upserts on q and fills written (len(a.cs) entries).
func (a *cursorAdvance) run(ctx context.Context, q querier, written []bool) error {
	clear(written)
	if a.unique {
		return advanceDistinct(ctx, q, a.cs, a.order, written)
	}
	return advanceSequential(ctx, q, a.cs, a.order, written)
}

// queue adds the upserts to b, each filling its entries of written
// (len(a.cs)) when the batch runs.
func (a *cursorAdvance) queue(b *pgx.Batch, written []bool) {
	clear(written)
	if !a.unique {
		for _, i := range a.order {
			c := a.cs[i]
			b.Queue(advanceOneSQL, c.Key.Stream, c.Key.Subscriber, c.Pos.Major, c.Pos.Minor, c.Pos.ID, nilIfEmpty(c.Token), impl.NanosOf(c.UpdatedAt)).
				QueryRow(func(row pgx.Row) error {
					err := row.Scan(&written[i])
					if errors.Is(err, pgx.ErrNoRows) {
						return nil
					}
					return err
				})
		}
		return
	}
	args, index := distinctArgs(a.cs, a.order)
	b.Queue(advanceManySQL, args...).Query(func(rows pgx.Rows) error {
		var k impl.CursorKey
		_, err := pgx.ForEachRow(rows, []any{&k.Stream, &k.Subscriber}, func() error {
			written[index[k]] = true
			return nil
		})
		return err
	})
}

// distinctArgs are advanceManySQL's arguments for distinct keys in order,
// and where each key is in cs.
func distinctArgs(cs []impl.Cursor, order []int) ([]any, map[impl.CursorKey]int) {
	n := len(order)
	streams, subs, ids := make([]string, n), make([]string, n), make([]string, n)
	majors, minors, updated := make([]int64, n), make([]int64, n), make([]int64, n)
	tokens := make([][]byte, n)
	index := make(map[impl.CursorKey]int, n)
	for j, i := range order {
		c := cs[i]
		streams[j], subs[j], ids[j] = c.Key.Stream, c.Key.Subscriber, c.Pos.ID
		majors[j], minors[j], updated[j] = c.Pos.Major, c.Pos.Minor, impl.NanosOf(c.UpdatedAt)
		tokens[j] = nilIfEmpty(c.Token)
		index[c.Key] = i
	}
	return []any{streams, subs, majors, minors, ids, tokens, updated}, index
}

func advanceDistinct(ctx context.Context, q querier, cs []impl.Cursor, order []int, written []bool) error {
	args, index := distinctArgs(cs, order)
	rows, err := q.Query(ctx, advanceManySQL, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k impl.CursorKey
		if err := rows.Scan(&k.Stream, &k.Subscriber); err != nil {
			return err
		}
		written[index[k]] = true
	}
	return rows.Err()
}

func advanceSequential(ctx context.Context, q querier, cs []impl.Cursor, order []int, written []bool) error {
	b := &pgx.Batch{}
	for _, i := range order {
		c := cs[i]
		b.Queue(advanceOneSQL, c.Key.Stream, c.Key.Subscriber, c.Pos.Major, c.Pos.Minor, c.Pos.ID, nilIfEmpty(c.Token), impl.NanosOf(c.UpdatedAt))
	}
	br := q.SendBatch(ctx, b)
	for _, i := range order {
		var ok bool
		err := br.QueryRow().Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			br.Close()
			return err
		}
		written[i] = ok
	}
	return br.Close()
}

// PutCursorBlind implements impl.BlindCursorWriter: the unguarded upsert of
// the known-bug engine variant. The reference engine never calls it.
func (s *Store) PutCursorBlind(ctx context.Context, c impl.Cursor) error {
	if err := checkCursor(c); err != nil {
		return classify("put cursor (blind)", true, err)
	}
	return s.do(ctx, "put cursor (blind)", true, func(ctx context.Context, q querier) error {
		_, err := q.Exec(ctx, putBlindSQL, c.Key.Stream, c.Key.Subscriber, c.Pos.Major, c.Pos.Minor, c.Pos.ID, nilIfEmpty(c.Token), impl.NanosOf(c.UpdatedAt))
		return err
	})
}

func compareKeys(a, b impl.CursorKey) int {
	return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Subscriber, b.Subscriber))
}
