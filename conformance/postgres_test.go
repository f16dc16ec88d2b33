package conformance_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/conformance/pgcert"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
	"github.com/deliverysim/deliverysim/model"
)

// postgresFactory certifies pgstore. Stores are recycled between the
// suite's many requests (each emptied first), so a property run costs a few
// DELETEs per sequence instead of a schema and its migrations.
func postgresFactory(t *testing.T) conformance.Factory {
	stores := pgtest.NewStores(t)
	return conformance.Factory{
		Name:     "pgstore",
		New:      func(tb testing.TB) impl.Store { return stores.New(tb) },
		Features: conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true},
	}
}

// The whole suite under each session time zone certify uses: pgstore keeps
// instants as BIGINT nanoseconds and no statement reads the session's zone
// (now(), timestamp casts), so it must pass under any; a store that does
// read it passes on UTC alone (TestPostgresPlantedZoneShiftedTTLIsCaught).
func TestPostgresConformance(t *testing.T) {
	for _, zone := range pgcert.TimeZones {
		t.Run("TimeZone="+zone, func(t *testing.T) {
			stores := pgtest.NewStoresTZ(t, zone)
			conformance.Run(t, conformance.Factory{
				Name:     "pgstore",
				Variant:  "TimeZone=" + zone,
				New:      func(tb testing.TB) impl.Store { return stores.New(tb) },
				Features: conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true},
			})
		})
	}
}

// Every planted bug, wrapped around pgstore, must be caught, by the
// sequential groups: the bugs are sequential, and the Linearizability
// histories took a third of this test's time (about 130 s of the package's
// 280 s beside other work) without catching anything the others missed.
func TestPostgresBuggyBackendsAreCaught(t *testing.T) {
	buggy := conformance.BuggyBackends(postgresFactory(t))
	if len(buggy) != 7 {
		t.Fatalf("got %d buggy backends, want 7 (pgstore declares BlindCursor, so every bug applies)", len(buggy))
	}
	for _, f := range buggy {
		t.Run(f.Name, func(t *testing.T) {
			// Side by side: the calls wait on round trips more than on
			// the processor (the state machines still take turns).
			t.Parallel()
			rep := conformance.Check(f, conformance.Only(conformance.GroupContract, conformance.GroupStateMachine),
				conformance.RapidChecks(200), conformance.ShrinkTime(time.Second), conformance.ArtifactsDir(t.TempDir()))
			if len(convictedBy(t, rep.Failures())) == 0 {
				t.Fatalf("%s passed the suite:\n%s", f.Name, rep)
			}
			for _, r := range rep.Failures() {
				t.Logf("caught by %s: %s", r.Name, pgFirstLine(r.Message))
			}
		})
	}
}

// The same seeded call sequence on memstore and pgstore must give equal
// results, call by call, and equal state after every call: same order, same
// instants (==, not just Equal), same bytes. The only difference allowed is
// nil versus empty for a list with nothing in it, which the contract does
// not fix.
func TestPostgresMatchesMemstore(t *testing.T) {
	ctx := context.Background()
	stores := pgtest.NewStores(t)
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			mem, pg := memstore.New(), stores.New(t)
			defer mem.Close()
			g := opGen{r: rand.New(rand.NewPCG(seed, 2024)), now: pgT0.Add(123456789)}
			for step := range 150 {
				op := g.next()
				want, werr := op.Exec(ctx, mem)
				got, gerr := op.Exec(ctx, pg)
				if werr != nil || gerr != nil {
					t.Fatalf("step %d %s: memstore err %v, pgstore err %v", step, op, werr, gerr)
				}
				if !reflect.DeepEqual(emptyToNil(want), emptyToNil(got)) {
					t.Fatalf("step %d %s:\nmemstore %s\npgstore  %s", step, op, want.Format(op.Kind), got.Format(op.Kind))
				}
				for _, probe := range []model.Op{{Kind: model.OpListCursors}, {Kind: model.OpListMessages}} {
					want, _ := probe.Exec(ctx, mem)
					got, err := probe.Exec(ctx, pg)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(emptyToNil(want), emptyToNil(got)) {
						t.Fatalf("after step %d %s the stores differ:\nmemstore %s\npgstore  %s", step, op, want.Format(probe.Kind), got.Format(probe.Kind))
					}
				}
			}
		})
	}
}

func emptyToNil(r model.Result) model.Result {
	if len(r.Written) == 0 {
		r.Written = nil
	}
	if len(r.Cursors) == 0 {
		r.Cursors = nil
	}
	if len(r.Messages) == 0 {
		r.Messages = nil
	}
	if len(r.Items) == 0 {
		r.Items = nil
	}
	return r
}

// opGen draws store calls over a small key space of byte-order-sensitive
// names (uppercase sorts before lowercase, multi-byte UTF-8 after ASCII),
// with instants that carry nanoseconds and a clock that moves forward in
// quarter seconds.
type opGen struct {
	r        *rand.Rand
	now      time.Time
	lastMark model.Op
}

var (
	genNames  = []string{"a", "B", "é", "ab", "Z"}
	genEvents = []string{"e1", "E2", "é3", "e10"}
)

func (g *opGen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

// dur is a multiple of a quarter second below max. Every instant is the
// start time plus such steps, so boundaries (lease ends exactly now, created
// exactly at the cutoff, seen exactly one window ago) are hit often.
func (g *opGen) dur(max time.Duration) time.Duration {
	const step = 250 * time.Millisecond
	return time.Duration(g.r.Int64N(int64(max/step))) * step
}

func (g *opGen) bytes() []byte {
	if g.r.IntN(3) == 0 {
		return nil
	}
	b := make([]byte, g.r.IntN(3))
	for i := range b {
		b[i] = byte(g.r.IntN(256))
	}
	return b
}

func (g *opGen) cursor() impl.Cursor {
	return impl.Cursor{
		Key: impl.CursorKey{Stream: g.pick(genNames), Subscriber: g.pick([]string{"", "bot"})},
		Pos: impl.Position{Major: g.r.Int64N(4) - 1, Minor: g.r.Int64N(3), ID: g.pick(genEvents)},
		// Not UTC, on purpose: the stored instant must come back in UTC.
		Token: g.bytes(), UpdatedAt: g.now.In(time.FixedZone("X", 7200)),
	}
}

func (g *opGen) key() impl.MessageKey {
	return impl.MessageKey{Subscriber: g.pick(genNames), EventID: g.pick(genEvents)}
}

func (g *opGen) next() model.Op {
	g.now = g.now.Add(g.dur(3 * time.Second))
	switch g.r.IntN(16) {
	case 0:
		return model.Op{Kind: model.OpGetCursor, CursorKey: g.cursor().Key}
	case 1, 2:
		var cs []impl.Cursor
		for range 1 + g.r.IntN(4) {
			cs = append(cs, g.cursor())
		}
		return model.Op{Kind: model.OpAdvanceCursors, Cursors: cs}
	case 3:
		return model.Op{Kind: model.OpPutCursorBlind, Cursor: g.cursor()}
	case 4, 5, 6:
		var ms []impl.Message
		for range 1 + g.r.IntN(4) {
			k := g.key()
			ms = append(ms, impl.Message{Subscriber: k.Subscriber, EventID: k.EventID, Stream: g.pick(genNames),
				Pos: impl.Position{Major: g.r.Int64N(5), ID: k.EventID}, Payload: g.bytes(),
				// Coarse steps make equal CreatedAt common, so EventID breaks ties.
				CreatedAt: g.now.Add(-time.Duration(g.r.IntN(3)) * time.Second)})
		}
		return model.Op{Kind: model.OpEnqueue, Messages: ms}
	case 7, 8:
		sub := ""
		if g.r.IntN(2) == 0 {
			sub = g.pick(genNames)
		}
		return model.Op{Kind: model.OpClaim, Claim: impl.ClaimRequest{Subscriber: sub, Owner: g.pick([]string{"n1", "n2"}),
			Now: g.now, Lease: g.dur(5 * time.Second), Limit: g.r.IntN(4)}}
	case 9:
		var ks []impl.MessageKey
		for range g.r.IntN(4) {
			ks = append(ks, g.key())
		}
		return model.Op{Kind: model.OpAck, Keys: ks}
	case 10:
		return model.Op{Kind: model.OpFail, Key: g.key(), Owner: g.pick([]string{"n1", "n2"}), Next: g.now.Add(g.dur(4 * time.Second)),
			Max: 1 + g.r.IntN(3), Reason: g.pick([]string{"timeout", "http 503"})}
	case 11:
		return model.Op{Kind: model.OpRequeue, Key: g.key(), Now: g.now}
	case 12:
		return model.Op{Kind: model.OpDeleteExpired, Cutoff: g.now.Add(-g.dur(10 * time.Second)), Now: g.now}
	case 13:
		return model.Op{Kind: model.OpTrimPerSubscriber, Max: g.r.IntN(4), Now: g.now}
	case 14:
		var items []impl.DeliveredItem
		for range g.r.IntN(4) {
			items = append(items, impl.DeliveredItem{ID: g.pick(genNames), Version: g.pick([]string{"v1", "v2"})})
		}
		var deleted []string
		for range g.r.IntN(2) {
			if id := g.pick(genNames); !deliveredHas(items, id) {
				deleted = append(deleted, id)
			}
		}
		app := g.pick([]string{"app1", "app2"})
		if g.r.IntN(2) == 0 {
			return model.Op{Kind: model.OpGetDelivered, App: app, Source: "repo"}
		}
		return model.Op{Kind: model.OpRecordDelivered, App: app, Source: "repo", Items: items, Deleted: deleted}
	default:
		op := model.Op{Kind: model.OpMarkProcessed, Sub: g.pick(genNames), EventID: g.pick(genEvents), Now: g.now, Window: g.dur(8 * time.Second)}
		if last := g.lastMark; last.Kind != "" && g.r.IntN(2) == 0 {
			// A redelivery, often exactly one window after the last one.
			op.Sub, op.EventID = last.Sub, last.EventID
			if g.r.IntN(2) == 0 {
				op.Window = g.now.Sub(last.Now)
			}
		}
		g.lastMark = op
		return op
	}
}

// deliveredHas keeps an id out of both halves of one RecordDelivered: the
// contract leaves that case open.
func deliveredHas(items []impl.DeliveredItem, id string) bool {
	for _, it := range items {
		if it.ID == id {
			return true
		}
	}
	return false
}

func pgFirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
