package pgstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// Every DELETE of an ack finds its rows through the key index: the range
// delete by one range scan, the others by one probe per key. None may
// join the keys with a subscriber's whole backlog (a hash or merge join
// over the index scan of "subscriber = $1"), which makes an ack's cost
// grow with the queue instead of with its keys. Planned without
// statistics, as a churning queue's table usually is.
func TestPostgresAckPlansProbeTheKeyIndex(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.NewStore(t)
	_, err := pg.EnqueueLeased(ctx, queued("backlog", ids("e%05d", 0, 20000, 1)))
	check(t, err)
	// One range over the backlog, dense then sparse (its guard would find
	// it too full and leave it to the fallback, which is planned anyway),
	// and many small groups under the range minimum (ackSQL).
	keys := keysOf("backlog", ids("e%05d", 5000, 6000, 1))
	keys = append(keys, keysOf("backlog", ids("e%05d", 10000, 20000, 100))...)
	for _, sub := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
		keys = append(keys, keysOf(sub, ids("k%02d", 0, 30, 1))...)
	}
	plans, err := pg.ExplainAck(ctx, keys)
	check(t, err)
	if len(plans) != 3 {
		t.Fatalf("want the range delete, its fallback and ackSQL, got %d DELETEs: %+v", len(plans), plans)
	}
	for i, p := range plans {
		nodes := strings.Join(p.Nodes, " | ")
		for _, bad := range []string{"Hash Join", "Merge Join", "Seq Scan", "Bitmap Heap Scan"} {
			if strings.Contains(nodes, bad) {
				t.Errorf("DELETE %d (%s) plans a %s: %s", i, p.SQL, bad, nodes)
			}
		}
		if !slices.ContainsFunc(p.Nodes, func(n string) bool { return strings.HasSuffix(n, "Scan on messages_pkey") }) {
			t.Errorf("DELETE %d (%s) does not use the key index: %s", i, p.SQL, nodes)
		}
		if i == 0 && strings.Contains(nodes, "Nested Loop") {
			t.Errorf("the range delete joins: %s", nodes)
		}
	}
}
