package pgstore_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

func queued(sub string, ids []string) []impl.Message {
	ms := make([]impl.Message, len(ids))
	for i, id := range ids {
		ms[i] = impl.Message{Subscriber: sub, EventID: id, Stream: "s", Pos: impl.Position{Major: int64(i), ID: id},
			Payload: []byte(id), CreatedAt: t0.Add(time.Duration(i) * time.Millisecond)}
	}
	return ms
}

func ids(format string, from, to, step int) []string {
	var out []string
	for i := from; i < to; i += step {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

func keysOf(sub string, ids []string) []impl.MessageKey {
	ks := make([]impl.MessageKey, len(ids))
	for i, id := range ids {
		ks[i] = impl.MessageKey{Subscriber: sub, EventID: id}
	}
	return ks
}

// A hand-off's acks delete exactly the acked rows, as memstore does,
// whichever way pgstore finds them: by a range scan when a subscriber's
// keys lie together (RangeAcked grows), and by per-key probes when the
// range between them holds many other rows (it does not), or when a
// subscriber has few keys. Ranges with holes, keys not present, repeated
// keys, bytewise-ordered multi-byte ids and a key acked and enqueued again
// in the same call are among the steps.
func TestPostgresHandOffAcksMatchMemstore(t *testing.T) {
	ctx := context.Background()
	pg, mem := pgtest.NewStore(t), memstore.New()
	defer mem.Close()
	pgw, _ := impl.AsHandOffWriter(pg)
	memw, _ := impl.AsHandOffWriter(mem)

	// Bytewise order is not the order of the runes' letters: "Z" < "a" <
	// "z" < "~" < "é" < "ä" in a COLLATE "C" index as in Go.
	var awk []string
	for _, p := range []string{"a", "Z", "é", "~", "ä", "z"} {
		awk = append(awk, ids(p+"%03d", 0, 12, 1)...)
	}
	setup := append(queued("dense", ids("e%04d", 0, 300, 1)), queued("sparse", ids("k%05d", 0, 2000, 1))...)
	setup = append(setup, queued("awk", awk)...)
	setup = append(setup, queued("small", ids("m%d", 0, 5, 1))...)

	type step struct {
		name   string
		w      impl.HandOffWrite
		ranged bool // some rows go by range scan
	}
	denseAck := keysOf("dense", ids("e%04d", 0, 100, 1))
	denseAck = append(denseAck, denseAck[3], denseAck[70], impl.MessageKey{Subscriber: "dense", EventID: "e0050x"}) // repeats, an absent key inside the range
	var holes []string                                                                                              // 100-199 but every seventh: those stay
	for i := 100; i < 200; i++ {
		if i%7 != 0 {
			holes = append(holes, fmt.Sprintf("e%04d", i))
		}
	}
	mixed := append(keysOf("small", ids("m%d", 0, 5, 2)), keysOf("dense", ids("e%04d", 200, 300, 1))...)
	mixed = append(mixed, impl.MessageKey{Subscriber: "nobody", EventID: "e0001"})
	mixed = append(mixed, keysOf("dense", ids("e%04d", 0, 40, 1))...) // already acked
	steps := []step{
		{"setup", impl.HandOffWrite{Enqueue: setup}, false},
		{"dense range with repeats and an absent key", impl.HandOffWrite{Ack: denseAck}, true},
		{"dense range with holes", impl.HandOffWrite{Ack: keysOf("dense", holes)}, true},
		{"sparse keys over a crowded range", impl.HandOffWrite{Ack: keysOf("sparse", ids("k%05d", 0, 2000, 40))}, false},
		{"bytewise order, one key enqueued again", impl.HandOffWrite{Ack: keysOf("awk", awk), Enqueue: queued("awk", awk[5:6])}, true},
		{"small groups, an unknown subscriber, keys gone already", impl.HandOffWrite{Ack: mixed}, true},
		{"the rest of sparse, one subscriber under the minimum", impl.HandOffWrite{Ack: append(keysOf("sparse", ids("k%05d", 0, 2000, 1)), keysOf("small", ids("m%d", 0, 5, 1))...)}, true},
	}
	for _, st := range steps {
		before := pg.RangeAcked()
		want, werr := memw.WriteHandOff(ctx, st.w)
		got, gerr := pgw.WriteHandOff(ctx, st.w)
		if werr != nil || gerr != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: pgstore %+v, %v; memstore %+v, %v", st.name, got, gerr, want, werr)
		}
		wantList, _ := mem.ListMessages(ctx, "")
		gotList, err := pg.ListMessages(ctx, "")
		check(t, err)
		if !reflect.DeepEqual(gotList, wantList) {
			t.Fatalf("%s: pgstore holds %d messages, memstore %d:\n%+v\n%+v", st.name, len(gotList), len(wantList), gotList, wantList)
		}
		if ranged := pg.RangeAcked() > before; ranged != st.ranged {
			t.Errorf("%s: deleted by a range scan: %v, want %v", st.name, ranged, st.ranged)
		}
	}
}

// Ack deletes a subscriber's keys the same ways, in a transaction of its
// own when a range delete is among them.
func TestPostgresAckMatchesMemstore(t *testing.T) {
	ctx := context.Background()
	pg, mem := pgtest.NewStore(t), memstore.New()
	defer mem.Close()
	setup := append(queued("dense", ids("e%04d", 0, 300, 1)), queued("sparse", ids("k%05d", 0, 2000, 1))...)
	setup = append(setup, queued("crowd", ids("k%05d", 0, 2000, 1))...)
	for _, s := range []impl.Store{pg, mem} {
		if _, err := s.Enqueue(ctx, setup); err != nil {
			t.Fatal(err)
		}
	}
	var nines []impl.MessageKey
	for i := 200; i < 300; i++ {
		if i%10 != 0 {
			nines = append(nines, impl.MessageKey{Subscriber: "dense", EventID: fmt.Sprintf("e%04d", i)})
		}
	}
	steps := []struct {
		name   string
		keys   []impl.MessageKey
		ranged bool
	}{
		{"dense range with repeats", append(keysOf("dense", ids("e%04d", 0, 100, 1)), keysOf("dense", ids("e%04d", 0, 10, 1))...), true},
		{"every other key: half the range stays, too many to walk", keysOf("dense", ids("e%04d", 100, 200, 2)), false},
		{"all but every tenth key", nines, true},
		{"sparse keys over a crowded range", keysOf("sparse", ids("k%05d", 0, 2000, 50)), false},
		{"few keys", keysOf("dense", ids("e%04d", 101, 120, 2)), false},
		// Two ranges in one call, the crowded one first (subscribers go
		// in bytewise order): each fallback must follow its own range's
		// verdict, not the last one's.
		{"a crowded range, then a dense one", append(keysOf("crowd", ids("k%05d", 1, 2000, 50)), keysOf("dense", ids("e%04d", 100, 200, 1))...), true},
	}
	for _, st := range steps {
		before := pg.RangeAcked()
		want, werr := mem.Ack(ctx, st.keys)
		got, gerr := pg.Ack(ctx, st.keys)
		if werr != nil || gerr != nil || got != want {
			t.Fatalf("%s: pgstore %d, %v; memstore %d, %v", st.name, got, gerr, want, werr)
		}
		wantList, _ := mem.ListMessages(ctx, "")
		gotList, err := pg.ListMessages(ctx, "")
		check(t, err)
		if !reflect.DeepEqual(gotList, wantList) {
			t.Fatalf("%s: pgstore holds %d messages, memstore %d", st.name, len(gotList), len(wantList))
		}
		if ranged := pg.RangeAcked() > before; ranged != st.ranged {
			t.Errorf("%s: deleted by a range scan: %v, want %v", st.name, ranged, st.ranged)
		}
	}
}
