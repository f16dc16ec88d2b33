package pgstore

import (
	"context"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
)

// Both halves run as one statement, so they commit together. Their id sets
// are made disjoint first: data-modifying CTEs see the same snapshot and
// must not touch one row twice.
const recordDeliveredSQL = `WITH gone AS (
    DELETE FROM delivered WHERE app = $1 AND source = $2 AND item_id = ANY($3::text[])
)
INSERT INTO delivered (app, source, item_id, version)
SELECT $1, $2, i, v FROM unnest($4::text[], $5::text[]) AS u(i, v)
ON CONFLICT (app, source, item_id) DO UPDATE SET version = EXCLUDED.version`

// A row comes back only if it was inserted, or updated because the entry
// had expired; a duplicate within the window leaves the row as it was.
const markProcessedSQL = `INSERT INTO dedup AS d (subscriber, event_id, seen_at) VALUES ($1, $2, $3)
ON CONFLICT (subscriber, event_id) DO UPDATE SET seen_at = EXCLUDED.seen_at
WHERE d.seen_at <= $4
RETURNING true`

const getDeliveredSQL = "SELECT item_id, version FROM delivered WHERE app = $1 AND source = $2 ORDER BY item_id"

func scanDelivered(row pgx.Row) (impl.DeliveredItem, error) {
	var it impl.DeliveredItem
	err := row.Scan(&it.ID, &it.Version)
	return it, err
}

// GetDelivered implements impl.Store. No items gives nil.
func (s *Store) GetDelivered(ctx context.Context, app, source string) ([]impl.DeliveredItem, error) {
	if err := checkText("delivered", app, source); err != nil {
		return nil, classify("get delivered", false, err)
	}
	return queryAll(ctx, s, "get delivered", false, scanDelivered, getDeliveredSQL, app, source)
}

// RecordDelivered implements impl.Store. Items are applied in order (the
// last version of a repeated id wins) and then deleted ids are removed, so
// an id in both ends up removed.
func (s *Store) RecordDelivered(ctx context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	if len(items) == 0 && len(deleted) == 0 {
		return nil
	}
	if err := checkText("delivered", append([]string{app, source}, deleted...)...); err != nil {
		return classify("record delivered", true, err)
	}
	gone := make(map[string]bool, len(deleted))
	for _, id := range deleted {
		gone[id] = true
	}
	latest := make(map[string]string, len(items))
	for _, it := range items {
		if err := checkText("delivered item", it.ID, it.Version); err != nil {
			return classify("record delivered", true, err)
		}
		latest[it.ID] = it.Version
	}
	ids := make([]string, 0, len(latest))
	for id := range latest {
		if !gone[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // one lock order for concurrent writers
	versions := make([]string, len(ids))
	for i, id := range ids {
		versions[i] = latest[id]
	}
	dels := slices.Sorted(maps.Keys(gone))
	return s.do(ctx, "record delivered", true, func(ctx context.Context, q querier) error {
		_, err := q.Exec(ctx, recordDeliveredSQL, app, source, dels, ids, versions)
		return err
	})
}

// MarkProcessed implements impl.Store. No row back means a duplicate
// within the window.
func (s *Store) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	subscriber, eventID, now, window := req.Subscriber, req.EventID, req.Now, req.Window
	if err := checkText("dedup key", subscriber, eventID); err != nil {
		return false, classify("mark processed", true, err)
	}
	n := impl.NanosOf(now)
	fresh, _, err := queryOne(ctx, s, "mark processed", true, scanBool, markProcessedSQL, subscriber, eventID, n, n-int64(window))
	return fresh, err
}

func scanBool(row pgx.Row) (bool, error) {
	var b bool
	err := row.Scan(&b)
	return b, err
}
