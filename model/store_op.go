package model

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// OpKind names one method of impl.Store (or of one of its optional
// capabilities: impl.BlindCursorWriter, impl.LeasingEnqueuer,
// impl.HandOffWriter).
type OpKind string

// The operations an Op can describe, one per store method.
const (
	OpGetCursor         OpKind = "GetCursor"
	OpListCursors       OpKind = "ListCursors"
	OpAdvanceCursors    OpKind = "AdvanceCursors"
	OpPutCursorBlind    OpKind = "PutCursorBlind"
	OpEnqueue           OpKind = "Enqueue"
	OpEnqueueLeased     OpKind = "EnqueueLeased" // impl.LeasingEnqueuer
	OpClaim             OpKind = "Claim"
	OpAck               OpKind = "Ack"
	OpFail              OpKind = "Fail"
	OpRequeue           OpKind = "Requeue"
	OpListMessages      OpKind = "ListMessages"
	OpDeleteExpired     OpKind = "DeleteExpired"
	OpTrimPerSubscriber OpKind = "TrimPerSubscriber"
	OpGetDelivered      OpKind = "GetDelivered"
	OpRecordDelivered   OpKind = "RecordDelivered"
	OpMarkProcessed     OpKind = "MarkProcessed"
	OpWriteHandOff      OpKind = "WriteHandOff" // impl.HandOffWriter
)

// Op is one store call as data, so that the same call can be applied to the
// model (Apply) and executed against a backend (Exec) and the two results
// compared (Result.Equal). Only the fields of Kind are read.
type Op struct {
	Kind OpKind

	CursorKey impl.CursorKey       // GetCursor
	Cursors   []impl.Cursor        // AdvanceCursors, WriteHandOff
	Cursor    impl.Cursor          // PutCursorBlind
	Messages  []impl.Message       // Enqueue, EnqueueLeased, WriteHandOff (leased)
	Claim     impl.ClaimRequest    // Claim
	Keys      []impl.MessageKey    // Ack, WriteHandOff
	Key       impl.MessageKey      // Fail, Requeue
	Owner     string               // Fail
	Next      time.Time            // Fail: next attempt
	Max       int                  // Fail: max attempts; TrimPerSubscriber: cap
	Reason    string               // Fail
	Now       time.Time            // Requeue, DeleteExpired, TrimPerSubscriber, MarkProcessed
	Cutoff    time.Time            // DeleteExpired
	Sub       string               // ListMessages, MarkProcessed
	App       string               // GetDelivered, RecordDelivered
	Source    string               // GetDelivered, RecordDelivered
	Items     []impl.DeliveredItem // RecordDelivered
	Deleted   []string             // RecordDelivered
	EventID   string               // MarkProcessed
	Window    time.Duration        // MarkProcessed
}

// Result is what an Op returned. Only the fields of the op's kind are set;
// the rest stay zero, so two Results compare with Equal regardless of kind.
type Result struct {
	OK       bool                 // GetCursor: found; Fail, Requeue: applied; MarkProcessed: new
	N        int                  // Enqueue, Ack, DeleteExpired, TrimPerSubscriber; WriteHandOff: acked
	Written  []bool               // AdvanceCursors, WriteHandOff: written; EnqueueLeased: inserted
	Inserted []bool               // WriteHandOff: inserted
	Cursor   impl.Cursor          // GetCursor (zero unless OK)
	Cursors  []impl.Cursor        // ListCursors
	Message  impl.Message         // Fail (zero unless OK)
	Messages []impl.Message       // Claim, ListMessages
	Items    []impl.DeliveredItem // GetDelivered
}

// ReadOnly reports whether op cannot change the store's state.
func (op Op) ReadOnly() bool {
	switch op.Kind {
	case OpGetCursor, OpListCursors, OpListMessages, OpGetDelivered:
		return true
	}
	return false
}

// Apply runs op on the model and returns the new state and the result.
func (op Op) Apply(s Store) (Store, Result) {
	var r Result
	switch op.Kind {
	case OpGetCursor:
		r.Cursor, r.OK = s.GetCursor(op.CursorKey)
	case OpListCursors:
		r.Cursors = s.ListCursors()
	case OpAdvanceCursors:
		s, r.Written = s.AdvanceCursors(op.Cursors)
	case OpPutCursorBlind:
		s = s.PutCursorBlind(op.Cursor)
	case OpEnqueue:
		s, r.N = s.Enqueue(op.Messages)
	case OpEnqueueLeased:
		s, r.Written = s.EnqueueLeased(op.Messages)
	case OpClaim:
		s, r.Messages = s.Claim(op.Claim)
	case OpAck:
		s, r.N = s.Ack(op.Keys)
	case OpFail:
		s, r.Message, r.OK = s.Fail(op.Key, op.Owner, op.Next, op.Max, op.Reason)
	case OpRequeue:
		s, r.OK = s.Requeue(op.Key, op.Now)
	case OpListMessages:
		r.Messages = s.ListMessages(op.Sub)
	case OpDeleteExpired:
		s, r.N = s.DeleteExpired(op.Cutoff, op.Now)
	case OpTrimPerSubscriber:
		s, r.N = s.TrimPerSubscriber(op.Max, op.Now)
	case OpGetDelivered:
		r.Items = s.GetDelivered(op.App, op.Source)
	case OpRecordDelivered:
		s = s.RecordDelivered(op.App, op.Source, op.Items, op.Deleted)
	case OpMarkProcessed:
		s, r.OK = s.MarkProcessed(op.Sub, op.EventID, op.Now, op.Window)
	case OpWriteHandOff:
		// The contract's definition: the three calls, in this order, as one.
		s, r.N = s.Ack(op.Keys)
		if len(op.Messages) > 0 {
			s, r.Inserted = s.EnqueueLeased(op.Messages)
		}
		if len(op.Cursors) > 0 {
			s, r.Written = s.AdvanceCursors(op.Cursors)
		}
	default:
		panic(fmt.Sprintf("model: unknown op kind %q", op.Kind))
	}
	return s, r.Normalize()
}

// ErrNoBlindWriter is returned by Exec for PutCursorBlind on a store that
// does not implement impl.BlindCursorWriter.
var ErrNoBlindWriter = errors.New("model: store does not implement impl.BlindCursorWriter")

// ErrNoLeasingEnqueuer is returned by Exec for EnqueueLeased on a store
// that does not implement impl.LeasingEnqueuer.
var ErrNoLeasingEnqueuer = errors.New("model: store does not implement impl.LeasingEnqueuer")

// ErrNoHandOffWriter is returned by Exec for WriteHandOff on a store that
// does not implement impl.HandOffWriter.
var ErrNoHandOffWriter = errors.New("model: store does not implement impl.HandOffWriter")

// Exec performs op on a real store and returns its normalised result.
func (op Op) Exec(ctx context.Context, st impl.Store) (Result, error) {
	var r Result
	var err error
	switch op.Kind {
	case OpGetCursor:
		r.Cursor, r.OK, err = st.GetCursor(ctx, op.CursorKey)
	case OpListCursors:
		r.Cursors, err = st.ListCursors(ctx)
	case OpAdvanceCursors:
		r.Written, err = st.AdvanceCursors(ctx, op.Cursors)
	case OpPutCursorBlind:
		w, ok := impl.AsBlindCursorWriter(st)
		if !ok {
			return r, ErrNoBlindWriter
		}
		err = w.PutCursorBlind(ctx, op.Cursor)
	case OpEnqueue:
		r.N, err = st.Enqueue(ctx, op.Messages)
	case OpEnqueueLeased:
		l, ok := impl.AsLeasingEnqueuer(st)
		if !ok {
			return r, ErrNoLeasingEnqueuer
		}
		r.Written, err = l.EnqueueLeased(ctx, op.Messages)
	case OpClaim:
		r.Messages, err = st.Claim(ctx, op.Claim)
	case OpAck:
		r.N, err = st.Ack(ctx, op.Keys)
	case OpFail:
		r.Message, r.OK, err = st.Fail(ctx, impl.FailRequest{Key: op.Key, Owner: op.Owner, NextAttempt: op.Next, MaxAttempts: op.Max, Reason: op.Reason})
	case OpRequeue:
		r.OK, err = st.Requeue(ctx, op.Key, op.Now)
	case OpListMessages:
		r.Messages, err = st.ListMessages(ctx, op.Sub)
	case OpDeleteExpired:
		r.N, err = st.DeleteExpired(ctx, op.Cutoff, op.Now)
	case OpTrimPerSubscriber:
		r.N, err = st.TrimPerSubscriber(ctx, op.Max, op.Now)
	case OpGetDelivered:
		r.Items, err = st.GetDelivered(ctx, op.App, op.Source)
	case OpRecordDelivered:
		err = st.RecordDelivered(ctx, op.App, op.Source, op.Items, op.Deleted)
	case OpMarkProcessed:
		r.OK, err = st.MarkProcessed(ctx, impl.MarkRequest{Subscriber: op.Sub, EventID: op.EventID, Now: op.Now, Window: op.Window})
	case OpWriteHandOff:
		w, ok := impl.AsHandOffWriter(st)
		if !ok {
			return r, ErrNoHandOffWriter
		}
		var h impl.HandOffResult
		h, err = w.WriteHandOff(ctx, impl.HandOffWrite{Ack: op.Keys, Enqueue: op.Messages, Cursors: op.Cursors})
		r.N, r.Inserted, r.Written = h.Acked, h.Inserted, h.Written
	default:
		return r, fmt.Errorf("model: unknown op kind %q", op.Kind)
	}
	if err != nil {
		return Result{}, err
	}
	return r.Normalize(), nil
}

// Normalize makes results from different backends comparable: fields the
// contract leaves unspecified (the cursor when not found, the message when
// Fail is stale) are zeroed, empty slices become nil, byte slices and
// instants are normalised. It returns a deep copy.
func (r Result) Normalize() Result {
	if !r.OK {
		r.Cursor = impl.Cursor{}
		r.Message = impl.Message{}
	}
	r.Cursor = NormCursor(r.Cursor)
	r.Message = NormMessage(r.Message)
	r.Written = normSlice(r.Written, func(b bool) bool { return b })
	r.Inserted = normSlice(r.Inserted, func(b bool) bool { return b })
	r.Cursors = normSlice(r.Cursors, NormCursor)
	r.Messages = normSlice(r.Messages, NormMessage)
	r.Items = normSlice(r.Items, func(it impl.DeliveredItem) impl.DeliveredItem { return it })
	return r
}

func normSlice[T any](in []T, f func(T) T) []T {
	if len(in) == 0 {
		return nil
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// Equal compares two results after normalising both.
func (r Result) Equal(o Result) bool {
	return reflect.DeepEqual(r.Normalize(), o.Normalize())
}

// Partition names the single piece of state op touches, for checking
// linearizability per key: "cursor(...)" for one cursor key, "queue(...)"
// for one subscriber's messages, "delivered(...)" for one (app, source),
// "dedup(...)" for one (subscriber, event). It returns "" when op touches
// several (ListCursors, DeleteExpired, a Claim over all subscribers, an
// Enqueue for two subscribers...).
func (op Op) Partition() string {
	cursor := func(k impl.CursorKey) string { return fmt.Sprintf("cursor(%q,%q)", k.Stream, k.Subscriber) }
	queue := func(sub string) string { return fmt.Sprintf("queue(%q)", sub) }
	same := func(parts []string) string {
		if len(parts) == 0 {
			return ""
		}
		for _, p := range parts[1:] {
			if p != parts[0] {
				return ""
			}
		}
		return parts[0]
	}
	var parts []string
	switch op.Kind {
	case OpGetCursor:
		return cursor(op.CursorKey)
	case OpPutCursorBlind:
		return cursor(op.Cursor.Key)
	case OpAdvanceCursors:
		for _, c := range op.Cursors {
			parts = append(parts, cursor(c.Key))
		}
		return same(parts)
	case OpEnqueue, OpEnqueueLeased:
		for _, m := range op.Messages {
			parts = append(parts, queue(m.Subscriber))
		}
		return same(parts)
	case OpAck:
		for _, k := range op.Keys {
			parts = append(parts, queue(k.Subscriber))
		}
		return same(parts)
	case OpClaim:
		if op.Claim.Subscriber != "" {
			return queue(op.Claim.Subscriber)
		}
	case OpListMessages:
		if op.Sub != "" {
			return queue(op.Sub)
		}
	case OpFail, OpRequeue:
		return queue(op.Key.Subscriber)
	case OpGetDelivered, OpRecordDelivered:
		return fmt.Sprintf("delivered(%q,%q)", op.App, op.Source)
	case OpMarkProcessed:
		return fmt.Sprintf("dedup(%q,%q)", op.Sub, op.EventID)
	case OpWriteHandOff:
		for _, k := range op.Keys {
			parts = append(parts, queue(k.Subscriber))
		}
		for _, m := range op.Messages {
			parts = append(parts, queue(m.Subscriber))
		}
		for _, c := range op.Cursors {
			parts = append(parts, cursor(c.Key))
		}
		return same(parts)
	}
	return ""
}

// String renders op as a call with every argument, exactly enough to
// reproduce it by hand.
func (op Op) String() string {
	var args []string
	switch op.Kind {
	case OpGetCursor:
		args = append(args, fmt.Sprintf("%q,%q", op.CursorKey.Stream, op.CursorKey.Subscriber))
	case OpAdvanceCursors:
		for _, c := range op.Cursors {
			args = append(args, FormatCursor(c))
		}
	case OpPutCursorBlind:
		args = append(args, FormatCursor(op.Cursor))
	case OpEnqueue, OpEnqueueLeased:
		args = appendMessages(args, op.Messages, op.Kind == OpEnqueueLeased)
	case OpClaim:
		c := op.Claim
		args = append(args, fmt.Sprintf("sub=%q owner=%q now=%s lease=%v limit=%d", c.Subscriber, c.Owner, FormatTime(c.Now), c.Lease, c.Limit))
	case OpAck:
		for _, k := range op.Keys {
			args = append(args, fmt.Sprintf("(%q,%q)", k.Subscriber, k.EventID))
		}
	case OpFail:
		args = append(args, fmt.Sprintf("(%q,%q) owner=%q next=%s max=%d reason=%q", op.Key.Subscriber, op.Key.EventID, op.Owner, FormatTime(op.Next), op.Max, op.Reason))
	case OpRequeue:
		args = append(args, fmt.Sprintf("(%q,%q) now=%s", op.Key.Subscriber, op.Key.EventID, FormatTime(op.Now)))
	case OpListMessages:
		args = append(args, fmt.Sprintf("%q", op.Sub))
	case OpDeleteExpired:
		args = append(args, fmt.Sprintf("cutoff=%s now=%s", FormatTime(op.Cutoff), FormatTime(op.Now)))
	case OpTrimPerSubscriber:
		args = append(args, fmt.Sprintf("max=%d now=%s", op.Max, FormatTime(op.Now)))
	case OpGetDelivered:
		args = append(args, fmt.Sprintf("%q,%q", op.App, op.Source))
	case OpRecordDelivered:
		args = append(args, fmt.Sprintf("%q,%q items=%v deleted=%q", op.App, op.Source, op.Items, op.Deleted))
	case OpMarkProcessed:
		args = append(args, fmt.Sprintf("%q,%q now=%s window=%v", op.Sub, op.EventID, FormatTime(op.Now), op.Window))
	case OpWriteHandOff:
		var ack, cursors []string
		for _, k := range op.Keys {
			ack = append(ack, fmt.Sprintf("(%q,%q)", k.Subscriber, k.EventID))
		}
		for _, c := range op.Cursors {
			cursors = append(cursors, FormatCursor(c))
		}
		args = append(args, "ack=["+strings.Join(ack, " ")+"]",
			"enqueue=["+strings.Join(appendMessages(nil, op.Messages, true), " ")+"]",
			"cursors=["+strings.Join(cursors, " ")+"]")
	}
	return string(op.Kind) + "(" + strings.Join(args, ", ") + ")"
}

// appendMessages renders msgs as String's arguments, with each lease when
// leased (EnqueueLeased, WriteHandOff).
func appendMessages(args []string, msgs []impl.Message, leased bool) []string {
	for _, m := range msgs {
		lease := ""
		if leased && m.LeaseOwner != "" {
			lease = fmt.Sprintf(" lease=%q until %s", m.LeaseOwner, FormatTime(m.LeaseUntil))
		}
		args = append(args, fmt.Sprintf("(%q,%q stream=%q pos=%s payload=%x created=%s%s)",
			m.Subscriber, m.EventID, m.Stream, FormatPos(m.Pos), m.Payload, FormatTime(m.CreatedAt), lease))
	}
	return args
}

// Format renders the fields of r that kind sets.
func (r Result) Format(kind OpKind) string {
	switch kind {
	case OpGetCursor:
		if !r.OK {
			return "not found"
		}
		return FormatCursor(r.Cursor)
	case OpListCursors:
		parts := make([]string, len(r.Cursors))
		for i, c := range r.Cursors {
			parts[i] = FormatCursor(c)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case OpAdvanceCursors, OpEnqueueLeased:
		return fmt.Sprint(r.Written)
	case OpEnqueue, OpAck, OpDeleteExpired, OpTrimPerSubscriber:
		return fmt.Sprint(r.N)
	case OpClaim, OpListMessages:
		parts := make([]string, len(r.Messages))
		for i, m := range r.Messages {
			parts[i] = FormatMessage(m)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case OpFail:
		if !r.OK {
			return "false (stale or absent)"
		}
		return "true " + FormatMessage(r.Message)
	case OpRequeue, OpMarkProcessed:
		return fmt.Sprint(r.OK)
	case OpGetDelivered:
		return fmt.Sprint(r.Items)
	case OpPutCursorBlind, OpRecordDelivered:
		return "ok"
	case OpWriteHandOff:
		return fmt.Sprintf("acked=%d inserted=%v written=%v", r.N, r.Inserted, r.Written)
	}
	return fmt.Sprintf("%+v", r)
}
