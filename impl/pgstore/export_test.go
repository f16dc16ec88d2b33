package pgstore

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
)

// SetCopyMinRows sets the batch size from which s enqueues by COPY first,
// so that tests can send small batches down that path.
func (s *Store) SetCopyMinRows(n int) { s.copyMinRows = n }

// SetRangeMinKeys sets how many keys of one subscriber a hand-off must
// ack for them to be deleted by the guarded range scan, so that tests can
// send small acks down that path.
func (s *Store) SetRangeMinKeys(n int) { s.rangeMinKeys = n }

// RangeAcked is how many rows hand-off acks have deleted by a range scan.
func (s *Store) RangeAcked() int64 { return s.rangeAcked.Load() }

// CopyOnly runs just the COPY attempt of Enqueue/EnqueueLeased on msgs, in
// one transaction of its own, whatever their number: copied says whether
// it inserted them, and when it did not, nothing may have been written.
func (s *Store) CopyOnly(ctx context.Context, msgs []impl.Message, leased bool) (copied bool, err error) {
	r, err := newEnqueueRows(msgs, leased)
	if err != nil {
		return false, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	return copyIn(ctx, conn, r, leased)
}

// ExplainAck plans, without running them, the DELETEs an ack of keys
// sends, with the plan's own settings, in a transaction that is rolled
// back: for each DELETE its SQL's first line and its plan's node types,
// depth first ("Index Scan on messages_pkey"). A fallback's guard
// verdict is set to "too full" first, so it is planned as it runs.
func (s *Store) ExplainAck(ctx context.Context, keys []impl.MessageKey) ([]PlannedDelete, error) {
	var n int
	b := &pgx.Batch{}
	newAckPlan(keys, s.rangeMinKeys).queue(b, s, &n)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for i := range len(b.QueuedQueries) {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, 'false', true)", ackDenseSetting(i)); err != nil {
			return nil, err
		}
	}
	var out []PlannedDelete
	for _, q := range b.QueuedQueries {
		if !strings.HasPrefix(q.SQL, "DELETE") { // the plan's settings
			if _, err := tx.Exec(ctx, q.SQL); err != nil {
				return nil, err
			}
			continue
		}
		var plan []struct{ Plan planNode }
		if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.SQL, q.Arguments...).Scan(&plan); err != nil {
			return nil, err
		}
		p := PlannedDelete{SQL: strings.SplitN(q.SQL, "\n", 2)[0]}
		plan[0].Plan.walk(&p.Nodes)
		out = append(out, p)
	}
	return out, nil
}

// PlannedDelete is one DELETE of an ack and its plan's nodes.
type PlannedDelete struct {
	SQL   string
	Nodes []string
}

type planNode struct {
	Type  string     `json:"Node Type"`
	Index string     `json:"Index Name"`
	Rel   string     `json:"Relation Name"`
	Plans []planNode `json:"Plans"`
}

func (p planNode) walk(out *[]string) {
	s := p.Type
	switch {
	case p.Index != "":
		s += " on " + p.Index
	case p.Rel != "":
		s += " on " + p.Rel
	}
	*out = append(*out, s)
	for _, c := range p.Plans {
		c.walk(out)
	}
}
