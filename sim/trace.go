package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Field is one key=value of a trace record. Records keep fields in the order
// they were written (never a map), so formatting is deterministic.
type Field struct {
	K, V string
}

// Record is one line of the trace: what an actor did at a step.
type Record struct {
	Step   int64
	Time   time.Time
	Actor  string
	Kind   string
	Fields []Field
}

// String formats the record on one line: step, elapsed virtual time since
// the epoch (seconds with nanoseconds), actor, kind, fields.
func (r Record) String() string {
	return string(r.appendTo(nil))
}

// appendTo appends the record's line (without its newline). It builds the
// line with strconv appends rather than fmt: formatting is a hot path of
// every run (each line is hashed), and the bytes are the same as
// "%07d %d.%09d %s %s" followed by " key=value" per field.
func (r Record) appendTo(b []byte) []byte {
	b = appendHead(b, r.Step, r.Time, r.Actor, r.Kind)
	for _, f := range r.Fields {
		b = appendKV(b, f.K, f.V)
	}
	return b
}

func appendHead(b []byte, step int64, t time.Time, actor, kind string) []byte {
	d := t.Sub(Epoch)
	sec, ns := int64(d/time.Second), int64(d%time.Second)
	if step < 0 || ns < 0 {
		// fmt's zero padding puts the sign first; never reached by a run
		// (steps count up from 0, time never runs before the epoch).
		return fmt.Appendf(b, "%07d %d.%09d %s %s", step, sec, ns, actor, kind)
	}
	b = appendZeroPadded(b, step, 7)
	b = append(b, ' ')
	b = strconv.AppendInt(b, sec, 10)
	b = append(b, '.')
	b = appendZeroPadded(b, ns, 9)
	b = append(b, ' ')
	b = append(b, actor...)
	b = append(b, ' ')
	return append(b, kind...)
}

// appendZeroPadded appends v >= 0 in decimal, zero-padded to width digits.
func appendZeroPadded(b []byte, v int64, width int) []byte {
	var tmp [20]byte
	d := strconv.AppendInt(tmp[:0], v, 10)
	for i := len(d); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, d...)
}

func appendKV(b []byte, k, v string) []byte {
	b = append(b, ' ')
	b = append(b, k...)
	b = append(b, '=')
	if needsQuote(v) {
		return strconv.AppendQuote(b, v)
	}
	return append(b, v...)
}

// needsQuote reports whether a field value is written quoted: empty, or
// holding a space, '=', '"', a newline, a tab or a backslash, or not
// backquotable (strconv.CanBackquote). ASCII values, nearly all of them,
// are decided in one pass over the bytes; the rest by that definition.
func needsQuote(v string) bool {
	if v == "" {
		return true
	}
	for i := 0; i < len(v); i++ {
		switch b := v[i]; {
		case b >= utf8.RuneSelf:
			return needsQuoteSlow(v)
		case b == ' ' || b == '=' || b == '"' || b == '\\' || b < ' ' || b == '`' || b == 0x7f:
			// Every control byte but tab fails CanBackquote, and tab is
			// quoted anyway.
			return true
		}
	}
	return false
}

func needsQuoteSlow(v string) bool {
	return v == "" || strings.ContainsAny(v, " =\"\n\t\\") || !strconv.CanBackquote(v)
}

func quoteIfNeeded(v string) string {
	if needsQuote(v) {
		return strconv.Quote(v)
	}
	return v
}

// FormatTrace renders records one per line.
func FormatTrace(rs []Record) []byte {
	var b []byte
	for _, r := range rs {
		b = r.appendTo(b)
		b = append(b, '\n')
	}
	return b
}

// HashTrace is the SHA-256 (hex) of FormatTrace(rs), hashed in chunks: a
// long run's formatted trace is never held whole.
func HashTrace(rs []Record) string {
	var th traceHasher
	for _, r := range rs {
		th.buf = r.appendTo(th.buf)
		th.endLine()
	}
	return th.sum()
}

// traceHasher hashes trace lines as they are made: a run with
// Config.TraceHashOnly keeps no records, only this (the same bytes as
// FormatTrace of the records it would have kept, so the same hash).
type traceHasher struct {
	h     hash.Hash
	buf   []byte
	lines int
}

// traceChunk is how many formatted bytes are buffered per hash write.
const traceChunk = 32 << 10

func (th *traceHasher) endLine() {
	th.buf = append(th.buf, '\n')
	th.lines++
	if len(th.buf) >= traceChunk {
		th.flush()
	}
}

func (th *traceHasher) flush() {
	if th.h == nil {
		th.h = sha256.New()
	}
	th.h.Write(th.buf)
	th.buf = th.buf[:0]
}

func (th *traceHasher) sum() string {
	th.flush()
	return hex.EncodeToString(th.h.Sum(nil))
}

// rec formats one record straight into the hash, as kv and appendTo would
// format it, without building the record.
func (th *traceHasher) rec(step int64, t time.Time, actor, kind string, pairs []any) {
	th.buf = appendHead(th.buf, step, t, actor, kind)
	for i := 0; i+1 < len(pairs); i += 2 {
		th.buf = appendVal(th.buf, pairs[i].(string), pairs[i+1])
	}
	th.endLine()
}

// appendVal appends " k=" and fmtVal(v), quoted as appendKV would; numbers
// and booleans never need quoting, so they are appended in place.
func appendVal(b []byte, k string, v any) []byte {
	switch x := v.(type) {
	case int:
		return strconv.AppendInt(append(append(append(b, ' '), k...), '='), int64(x), 10)
	case int64:
		return strconv.AppendInt(append(append(append(b, ' '), k...), '='), x, 10)
	case uint64:
		return strconv.AppendUint(append(append(append(b, ' '), k...), '='), x, 10)
	case bool:
		return strconv.AppendBool(append(append(append(b, ' '), k...), '='), x)
	}
	return appendKV(b, k, fmtVal(v))
}

// kv builds fields from alternating keys and values.
func kv(pairs ...any) []Field {
	fs := make([]Field, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		fs = append(fs, Field{K: pairs[i].(string), V: fmtVal(pairs[i+1])})
	}
	return fs
}

// fmtVal formats a field value: a string, int, int64, uint64, bool,
// time.Duration or time.Time, the kinds a record holds (fmt's %v of each).
// Any other kind is a bug in the caller, and panics: the switch is closed
// so that no value escapes through it (fmt.Sprint or a method call through
// an interface would make every boxed field of every rec call a heap
// allocation, traced or not). TestRecordFieldKinds checks the call sites.
func fmtVal(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case bool:
		return strconv.FormatBool(x)
	case time.Duration:
		return x.String()
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	panic("sim: a trace field of a kind records do not hold (string, int, int64, uint64, bool, time.Duration, time.Time)")
}
