package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model"
)

// checkHandOffWrite certifies impl.HandOffWriter against the model: each
// WriteHandOff must return what Ack, then EnqueueLeased, then
// AdvanceCursors return on the model in that order, and leave the state
// they leave. The script covers a key acked and enqueued again in one
// call, an enqueued key already present (on Postgres the COPY fails and the
// call must start over with the ON CONFLICT insert), a key repeated in the
// batch, cursors written, refused and repeated, each part alone, nothing
// at all, and a batch large enough for COPY.
func checkHandOffWrite(t testing.TB, c client) {
	w, ok := impl.AsHandOffWriter(c.st)
	isTrue(t, ok, "impl.AsHandOffWriter finds the capability")
	var m model.Store
	setup := func(op model.Op) {
		t.Helper()
		got, err := op.Exec(c.ctx, c.st)
		noErr(t, err, "%s", op)
		var want model.Result
		m, want = op.Apply(m)
		eq(t, want.Normalize(), got.Normalize(), "%s", op)
	}
	step := func(why string, hw impl.HandOffWrite) {
		t.Helper()
		var want impl.HandOffResult
		var r model.Result
		m, r = model.Op{Kind: model.OpAck, Keys: hw.Ack}.Apply(m)
		want.Acked = r.N
		if len(hw.Enqueue) > 0 {
			m, r = model.Op{Kind: model.OpEnqueueLeased, Messages: hw.Enqueue}.Apply(m)
			want.Inserted = r.Written
		}
		if len(hw.Cursors) > 0 {
			m, r = model.Op{Kind: model.OpAdvanceCursors, Cursors: hw.Cursors}.Apply(m)
			want.Written = r.Written
		}
		got, err := w.WriteHandOff(c.ctx, hw)
		noErr(t, err, "WriteHandOff: %s", why)
		eq(t, want, got, "WriteHandOff's results must be those of Ack, EnqueueLeased and AdvanceCursors in that order: %s", why)
		sameMessages(t, m.ListMessages(""), c.list(""), "messages after WriteHandOff: "+why)
		eq(t, normCursors(m.ListCursors()), normCursors(c.cursors()), "cursors after WriteHandOff: %s", why)
	}

	setup(model.Op{Kind: model.OpEnqueue, Messages: []impl.Message{msg("b1", "old", at(0))}})
	setup(model.Op{Kind: model.OpEnqueueLeased, Messages: []impl.Message{leasedMsg("b1", "a1", at(sec), "n1", at(time.Minute))}})
	setup(model.Op{Kind: model.OpAdvanceCursors, Cursors: []impl.Cursor{cursor("s", "", 5, 0, "", "five", at(0))}})

	again := leasedMsg("b1", "a1", at(2*sec), "n1", at(2*time.Minute))
	again.Payload = []byte("again")
	repeat := leasedMsg("b2", "x", at(2*sec), "n2", at(time.Hour))
	repeat.Payload = []byte("second")
	step("ack then re-enqueue one key, an enqueued key already present, a repeated key, cursors refused, written and repeated", impl.HandOffWrite{
		Ack: []impl.MessageKey{key("b1", "a1"), key("b1", "absent")},
		Enqueue: []impl.Message{again, leasedMsg("b1", "old", at(2*sec), "n1", at(time.Hour)),
			leasedMsg("b2", "x", at(2*sec), "n1", at(time.Hour)), repeat, msg("b3", "plain", at(2*sec))},
		Cursors: []impl.Cursor{cursor("s", "", 4, 0, "", "four", at(sec)), cursor("t", "", 1, 0, "", "one", at(sec)),
			cursor("t", "", 2, 0, "", "two", at(sec)), cursor("t", "", 2, 0, "", "two again", at(sec))},
	})
	step("acks alone", impl.HandOffWrite{Ack: []impl.MessageKey{key("b3", "plain"), key("b1", "old")}})
	step("cursors alone", impl.HandOffWrite{Cursors: []impl.Cursor{cursor("s", "", 6, 0, "", "six", at(2*sec))}})
	step("a leased enqueue alone", impl.HandOffWrite{Enqueue: []impl.Message{leasedMsg("b4", "y", at(3*sec), "n1", at(time.Hour))}})
	step("nothing", impl.HandOffWrite{})

	// A replay's shape: the ack of one batch, the insert of the next, the
	// cursor; batches past the size from which Postgres uses COPY.
	var prev []impl.MessageKey
	for round := range 3 {
		batch := make([]impl.Message, 40)
		for i := range batch {
			batch[i] = leasedMsg("bot", fmt.Sprintf("r%d-%02d", round, i), at(time.Duration(10+round)*sec), "n1", at(time.Hour))
			batch[i].Stream, batch[i].Pos = "s", impl.Position{Major: int64(10*(round+1) + i)}
		}
		step(fmt.Sprintf("replay round %d", round), impl.HandOffWrite{Ack: prev, Enqueue: batch,
			Cursors: []impl.Cursor{cursor("s", "", int64(10*(round+1)+39), 0, "", "r", at(time.Duration(10+round)*sec))}})
		prev = keys(batch)
	}
	step("the last batch's ack", impl.HandOffWrite{Ack: prev})
}

func normCursors(cs []impl.Cursor) []impl.Cursor {
	out := make([]impl.Cursor, len(cs))
	for i, c := range cs {
		out[i] = model.NormCursor(c)
	}
	return out
}
