package conformance

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model"
)

// The Contract group's expectations. A failure must let a stranger find
// the broken rule without reading the suite: it names the store call the
// expectation is about (the last call the check made, with its arguments
// and what it returned), what the contract expects and what came back,
// field by field for messages and cursors, with every instant in RFC 3339.
// testify's require printed "Should be true" for a bare boolean and
// time.Time's wall/ext/loc internals for a struct diff; neither says which
// rule broke.

// callLog remembers the last store calls of a check (copies of a client
// share it): the call an expectation is about is often not the very last
// one (a Fail, then the ListMessages that reads its effect).
type callLog struct {
	mu     sync.Mutex
	recent []string
}

// recentCalls is how many calls a failure quotes.
const recentCalls = 3

func (l *callLog) set(format string, args ...any) {
	l.mu.Lock()
	l.recent = append(l.recent, fmt.Sprintf(format, args...))
	if len(l.recent) > recentCalls {
		l.recent = l.recent[len(l.recent)-recentCalls:]
	}
	l.mu.Unlock()
}

func (l *callLog) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recent) == 0 {
		return ""
	}
	return "\n    " + strings.Join(l.recent, "\n    ")
}

// callTB is the testing.TB a Contract check runs with: every failure it
// reports ends with the last store calls, so that an expectation written
// as "the lease owner's failure is recorded" still says which call
// returned what.
type callTB struct {
	testing.TB
	log *callLog
}

func (t callTB) withCall(msg string) string {
	if last := t.log.get(); last != "" {
		return msg + "\n  the last store calls, oldest first:" + last
	}
	return msg
}

func (t callTB) Errorf(format string, args ...any) {
	t.TB.Helper()
	t.TB.Error(t.withCall(fmt.Sprintf(format, args...)))
}

func (t callTB) Fatalf(format string, args ...any) {
	t.TB.Helper()
	t.TB.Fatal(t.withCall(fmt.Sprintf(format, args...)))
}

func (t callTB) Error(args ...any) {
	t.TB.Helper()
	t.TB.Error(t.withCall(strings.TrimSuffix(fmt.Sprintln(args...), "\n")))
}

func (t callTB) Fatal(args ...any) {
	t.TB.Helper()
	t.TB.Fatal(t.withCall(strings.TrimSuffix(fmt.Sprintln(args...), "\n")))
}

func what(msg string, args []any) string {
	if len(args) == 0 {
		return msg
	}
	return fmt.Sprintf(msg, args...)
}

// same is testify's notion of equal: bytes.Equal for byte slices,
// reflect.DeepEqual otherwise (so a time.Time must be the normalised value
// itself, not only the same instant).
func same(want, got any) bool {
	wb, ok1 := want.([]byte)
	gb, ok2 := got.([]byte)
	if ok1 && ok2 {
		return bytes.Equal(wb, gb)
	}
	return reflect.DeepEqual(want, got)
}

// eq fails the check unless got equals want; msg (a format with args)
// says what the contract expects.
func eq(t testing.TB, want, got any, msg string, args ...any) {
	t.Helper()
	if same(want, got) {
		return
	}
	var b strings.Builder
	b.WriteString(what(msg, args))
	if d := diff(want, got); d != "" {
		b.WriteString("\n" + d)
	}
	fmt.Fprintf(&b, "\n  want: %s\n  got:  %s", show(want), show(got))
	t.Fatal(b.String())
}

func isTrue(t testing.TB, ok bool, msg string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatal(what(msg, args) + " (want true, got false)")
	}
}

func isFalse(t testing.TB, ok bool, msg string, args ...any) {
	t.Helper()
	if ok {
		t.Fatal(what(msg, args) + " (want false, got true)")
	}
}

// length fails unless x (a slice) has n elements.
func length(t testing.TB, x any, n int, msg string, args ...any) {
	t.Helper()
	if got := reflect.ValueOf(x).Len(); got != n {
		t.Fatalf("%s: want %d, got %d: %s", what(msg, args), n, got, show(x))
	}
}

func empty(t testing.TB, x any, msg string, args ...any) {
	t.Helper()
	if v := reflect.ValueOf(x); v.IsValid() && v.Len() != 0 {
		t.Fatalf("%s: want none, got %d: %s", what(msg, args), v.Len(), show(x))
	}
}

func noErr(t testing.TB, err error, msg string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s returned an error: %v (the contract allows no error here: a store that works returns none)", what(msg, args), err)
	}
}

func isErr(t testing.TB, err error, msg string, args ...any) {
	t.Helper()
	if err == nil {
		t.Fatal(what(msg, args) + " (it returned no error)")
	}
}

// exactTime fails unless got is want itself (==: the same instant, zone
// and monotonic reading), as impl.TimeOf returns it.
func exactTime(t testing.TB, want, got time.Time, msg string, args ...any) {
	t.Helper()
	if got != want {
		t.Fatalf("%s read back %s, want exactly %s (impl.TimeOf(impl.NanosOf(t)): UTC, nanoseconds intact, no monotonic reading)", what(msg, args), showTime(got), showTime(want))
	}
}

// showTime is an instant in RFC 3339 with nanoseconds; a value that is the
// same instant but not what impl.TimeOf returns (another zone, a monotonic
// reading) says so, or two values would print alike and differ.
func showTime(tm time.Time) string {
	s := model.FormatTime(tm)
	if tm != impl.TimeOf(impl.NanosOf(tm)) {
		var why []string
		if tm.Location() != time.UTC {
			why = append(why, "zone "+tm.Location().String())
		}
		if tm.Round(0) != tm {
			why = append(why, "with a monotonic reading")
		}
		s += " (not normalised: " + strings.Join(why, ", ") + ")"
	}
	return s
}

// errNote is a call's error as its log line shows it: nothing for none.
func errNote(err error) string {
	if err == nil {
		return ""
	}
	return ", error: " + err.Error()
}

func showKey(k impl.MessageKey) string { return k.Subscriber + "/" + k.EventID }

// show renders the values the contract speaks of; anything else as %v.
func show(v any) string {
	switch x := v.(type) {
	case time.Time:
		return showTime(x)
	case impl.Message:
		return model.FormatMessage(x)
	case []impl.Message:
		if len(x) == 0 {
			return "no messages"
		}
		var lines []string
		for i, m := range x {
			if len(x) > maxShown && i == maxShown/2 {
				lines = append(lines, fmt.Sprintf("\n    ... %d more ...", len(x)-maxShown))
			}
			if len(x) <= maxShown || i < maxShown/2 || i >= len(x)-maxShown/2 {
				lines = append(lines, "\n    "+model.FormatMessage(m))
			}
		}
		return fmt.Sprintf("%d messages:%s", len(x), strings.Join(lines, ""))
	case impl.Cursor:
		return model.FormatCursor(x)
	case []impl.Cursor:
		if len(x) == 0 {
			return "no cursors"
		}
		var lines []string
		for _, c := range x {
			lines = append(lines, "\n    "+model.FormatCursor(c))
		}
		return fmt.Sprintf("%d cursors:%s", len(x), strings.Join(lines, ""))
	case impl.MessageKey:
		return showKey(x)
	case []impl.MessageKey:
		var ks []string
		for _, k := range x {
			ks = append(ks, showKey(k))
		}
		if len(ks) > maxShown {
			return fmt.Sprintf("%d keys [%s ... %s]", len(ks), strings.Join(ks[:maxShown/2], " "), strings.Join(ks[len(ks)-maxShown/2:], " "))
		}
		return "[" + strings.Join(ks, " ") + "]"
	case string:
		return fmt.Sprintf("%q", x)
	case []byte:
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprintf("%+v", v)
}

// diff names the fields in which two messages or cursors (or slices of
// them) differ, message by message, with times in RFC 3339.
func diff(want, got any) string {
	switch w := want.(type) {
	case impl.Message:
		if g, ok := got.(impl.Message); ok {
			return fieldDiff(showKey(w.Key()), w, g)
		}
	case impl.Cursor:
		if g, ok := got.(impl.Cursor); ok {
			return fieldDiff(fmt.Sprintf("cursor %q/%q", w.Key.Stream, w.Key.Subscriber), w, g)
		}
	case []impl.Message:
		if g, ok := got.([]impl.Message); ok {
			return messagesDiff(w, g)
		}
	case []impl.Cursor:
		if g, ok := got.([]impl.Cursor); ok {
			var lines []string
			if len(w) != len(g) {
				lines = append(lines, fmt.Sprintf("  %d cursors, want %d", len(g), len(w)))
			}
			for i := range min(len(w), len(g)) {
				if d := fieldDiff(fmt.Sprintf("cursor %d (%q/%q)", i, w[i].Key.Stream, w[i].Key.Subscriber), w[i], g[i]); d != "" {
					lines = append(lines, d)
				}
			}
			return strings.Join(lines, "\n")
		}
	}
	return ""
}

// messagesDiff compares two lists of messages: the keys missing, extra or
// repeated, the order, then every field of the messages both hold.
func messagesDiff(want, got []impl.Message) string {
	var lines []string
	count := func(ms []impl.Message) map[impl.MessageKey]int {
		n := map[impl.MessageKey]int{}
		for _, m := range ms {
			n[m.Key()]++
		}
		return n
	}
	wn, gn := count(want), count(got)
	var missing, unexpected []string
	for i, m := range want {
		if gn[m.Key()] == 0 {
			missing = append(missing, fmt.Sprintf("%s (position %d)", showKey(m.Key()), i+1))
		}
	}
	for i, m := range got {
		switch {
		case wn[m.Key()] == 0:
			unexpected = append(unexpected, showKey(m.Key()))
		case gn[m.Key()] > wn[m.Key()] && firstIndex(got, m.Key()) != i:
			lines = append(lines, fmt.Sprintf("  %s listed %d times, want %d (one row per key)", showKey(m.Key()), gn[m.Key()], wn[m.Key()]))
		}
	}
	if len(missing) > 0 {
		lines = append(lines, fmt.Sprintf("  missing %d of the %d wanted: %s", len(missing), len(want), elide(missing, 10)))
	}
	if len(unexpected) > 0 {
		lines = append(lines, fmt.Sprintf("  %d unexpected: %s", len(unexpected), elide(unexpected, 10)))
	}
	if len(lines) == 0 {
		for i := range want {
			if want[i].Key() != got[i].Key() {
				lines = append(lines, fmt.Sprintf("  out of order from position %d: %s where %s belongs", i, showKey(got[i].Key()), showKey(want[i].Key())))
				break
			}
		}
	}
	byKey := map[impl.MessageKey]impl.Message{}
	for _, m := range got {
		if _, seen := byKey[m.Key()]; !seen {
			byKey[m.Key()] = m
		}
	}
	for _, w := range want {
		if g, ok := byKey[w.Key()]; ok {
			if d := fieldDiff(showKey(w.Key()), w, g); d != "" {
				lines = append(lines, d)
			}
		}
	}
	return strings.Join(lines, "\n")
}

// maxShown bounds the messages or keys a failure prints of one list (the
// first and the last halves): the large-data checks list hundreds.
const maxShown = 20

// elide joins xs, the first n of them and a count of the rest.
func elide(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return fmt.Sprintf("%s, and %d more", strings.Join(xs[:n], ", "), len(xs)-n)
}

func firstIndex(ms []impl.Message, k impl.MessageKey) int {
	for i, m := range ms {
		if m.Key() == k {
			return i
		}
	}
	return -1
}

// fieldDiff lists, one line each, the fields of two structs of one type
// that differ: "  b1/e1 NextAttemptAt: want 2025-…Z, got 2025-…Z".
func fieldDiff(name string, want, got any) string {
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	var lines []string
	for i := range wv.NumField() {
		wf, gf := wv.Field(i).Interface(), gv.Field(i).Interface()
		if same(wf, gf) {
			continue
		}
		lines = append(lines, fmt.Sprintf("  %s %s: want %s, got %s", name, wv.Type().Field(i).Name, show(wf), show(gf)))
	}
	return strings.Join(lines, "\n")
}

// resultDiff names what differs between the model's result of a call and
// the backend's, field by field, quoting the contract's answer where a
// store written from the text alone went wrong before (a dead message's
// NextAttemptAt).
func resultDiff(op model.Op, want, got model.Result) string {
	var lines []string
	if want.OK != got.OK {
		lines = append(lines, fmt.Sprintf("  ok: want %v, got %v", want.OK, got.OK))
	}
	if want.N != got.N {
		lines = append(lines, fmt.Sprintf("  count: want %d, got %d", want.N, got.N))
	}
	if d := fieldDiff(showKey(want.Message.Key()), want.Message, got.Message); d != "" && want.OK && got.OK {
		lines = append(lines, d)
		if op.Kind == model.OpFail && want.Message.Dead && !same(want.Message.NextAttemptAt, got.Message.NextAttemptAt) {
			lines = append(lines, fmt.Sprintf("  (the contract: %q)", ruleFailDeadNextAttempt))
		}
	}
	if d := messagesDiff(want.Messages, got.Messages); d != "" {
		lines = append(lines, d)
	}
	if d := diff(want.Cursors, got.Cursors); d != "" {
		lines = append(lines, d)
	}
	if d := fieldDiff("cursor", want.Cursor, got.Cursor); d != "" && want.OK && got.OK {
		lines = append(lines, d)
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n  differences (want is the model's):\n" + strings.Join(lines, "\n")
}
