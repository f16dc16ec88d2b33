package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model"
)

// The checker-cost benchmark needs a large concurrent history of store
// calls of the kind the store suite's linearizability check records: a mix
// of every kind of state, each call touching one key, with the store's
// "now" moving forward in 100 ms steps shared by all clients. It is
// generated here from model.Op (the suite's own generator is unexported)
// and checked against model.Store, as the suite does.

// historyEpoch is the store's virtual time zero for recorded histories.
var historyEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// histOut is one recorded call's outcome.
type histOut struct {
	res model.Result
	err error
}

type histClient struct {
	id  int
	r   *rand.Rand
	now time.Time
}

func (c *histClient) steps(lo, hi int) time.Duration {
	return time.Duration(lo+c.r.IntN(hi-lo+1)) * 100 * time.Millisecond
}

func choose[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// histOp draws one call touching a single key: a cursor, a subscriber's
// queue, an (app, source), or a dedup entry. Keys come from small pools so
// that calls on one key overlap in time.
func histOp(c *histClient) model.Op {
	owner := fmt.Sprintf("node%d", c.id)
	switch c.r.IntN(4) {
	case 0:
		key := choose(c.r, impl.CursorKey{Stream: "s1"}, impl.CursorKey{Stream: "s2"}, impl.CursorKey{Stream: "s3", Subscriber: "bot1"})
		if c.r.IntN(4) == 0 {
			return model.Op{Kind: model.OpGetCursor, CursorKey: key}
		}
		return model.Op{Kind: model.OpAdvanceCursors, Cursors: []impl.Cursor{{
			Key: key, Pos: impl.Position{Major: int64(c.r.IntN(8)), Minor: int64(c.r.IntN(2))},
			Token: []byte(owner), UpdatedAt: c.now,
		}}}
	case 1:
		sub := choose(c.r, "bot1", "bot2", "bot3", "bot4")
		k := impl.MessageKey{Subscriber: sub, EventID: choose(c.r, "e1", "e2", "e3", "e4")}
		switch c.r.IntN(6) {
		case 0, 1:
			return model.Op{Kind: model.OpEnqueue, Messages: []impl.Message{{
				Subscriber: sub, EventID: k.EventID, Stream: "s", Pos: impl.Position{Major: int64(c.r.IntN(4))},
				Payload: []byte(owner), CreatedAt: c.now.Add(-c.steps(0, 3)),
			}}}
		case 2:
			return model.Op{Kind: model.OpClaim, Claim: impl.ClaimRequest{Subscriber: sub, Owner: owner, Now: c.now, Lease: c.steps(1, 4), Limit: 1 + c.r.IntN(2)}}
		case 3:
			return model.Op{Kind: model.OpAck, Keys: []impl.MessageKey{k}}
		case 4:
			return model.Op{Kind: model.OpFail, Key: k, Owner: owner, Next: c.now.Add(c.steps(0, 3)), Max: 1 + c.r.IntN(3), Reason: "http 503"}
		}
		return model.Op{Kind: model.OpRequeue, Key: k, Now: c.now}
	case 2:
		app := choose(c.r, "app1", "app2", "app3")
		if c.r.IntN(3) == 0 {
			return model.Op{Kind: model.OpGetDelivered, App: app, Source: "repo"}
		}
		return model.Op{Kind: model.OpRecordDelivered, App: app, Source: "repo",
			Items: []impl.DeliveredItem{{ID: choose(c.r, "f1", "f2", "f3"), Version: owner}}}
	}
	return model.Op{Kind: model.OpMarkProcessed, Sub: choose(c.r, "bot1", "bot2"), EventID: choose(c.r, "e1", "e2", "e3"),
		Now: c.now, Window: c.steps(2, 5)}
}

// recordHistory runs ops calls from clients goroutines against store and
// returns them as a porcupine history, timestamped from one counter.
func recordHistory(store impl.Store, clients, ops int, seed uint64) []porcupine.Operation {
	var (
		clock, virtual atomic.Int64
		mu             sync.Mutex
		history        = make([]porcupine.Operation, 0, ops)
		wg             sync.WaitGroup
	)
	ctx := context.Background()
	for id := range clients {
		n := ops / clients
		if id < ops%clients {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &histClient{id: id, r: rand.New(rand.NewPCG(seed, uint64(id)))}
			for range n {
				runtime.Gosched() // let calls of different clients overlap
				c.now = historyEpoch.Add(time.Duration(virtual.Add(int64(c.r.IntN(3)))) * 100 * time.Millisecond)
				op := histOp(c)
				call := clock.Add(1)
				res, err := op.Exec(ctx, store)
				ret := clock.Add(1)
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: id, Input: op, Call: call, Output: histOut{res, err}, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return history
}

// storeModel is model.Store as a porcupine model; partitioned checks each
// key's calls on their own (every generated call touches one key).
func storeModel(partitioned bool) porcupine.Model {
	nd := porcupine.NondeterministicModel{
		Init: func() []any { return []any{model.Store{}} },
		Step: func(state, input, output any) []any {
			s, op, out := state.(model.Store), input.(model.Op), output.(histOut)
			next, want := op.Apply(s)
			switch {
			case out.err != nil && op.ReadOnly():
				return []any{s}
			case out.err != nil:
				return []any{s, next}
			case want.Equal(out.res):
				return []any{next}
			}
			return nil
		},
		Equal: func(a, b any) bool { return a.(model.Store).Equal(b.(model.Store)) },
		Hash:  func(s any) uint64 { return s.(model.Store).Hash() },
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%s -> %+v", input.(model.Op), output.(histOut).res)
		},
	}
	if partitioned {
		nd.Partition = partitionHistory
	}
	return nd.ToModel()
}

func partitionHistory(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(model.Op).Partition()
		if k == "" {
			return [][]porcupine.Operation{history}
		}
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}
