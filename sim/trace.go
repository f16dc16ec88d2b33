package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
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
	var b bytes.Buffer
	r.appendTo(&b)
	return b.String()
}

func (r Record) appendTo(b *bytes.Buffer) {
	d := r.Time.Sub(Epoch)
	fmt.Fprintf(b, "%07d %d.%09d %s %s", r.Step, int64(d/time.Second), int64(d%time.Second), r.Actor, r.Kind)
	for _, f := range r.Fields {
		b.WriteByte(' ')
		b.WriteString(f.K)
		b.WriteByte('=')
		b.WriteString(quoteIfNeeded(f.V))
	}
}

func quoteIfNeeded(v string) string {
	if v == "" || strings.ContainsAny(v, " =\"\n\t\\") || !strconv.CanBackquote(v) {
		return strconv.Quote(v)
	}
	return v
}

// FormatTrace renders records one per line.
func FormatTrace(rs []Record) []byte {
	var b bytes.Buffer
	for _, r := range rs {
		r.appendTo(&b)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// HashTrace is the SHA-256 (hex) of FormatTrace(rs), hashed line by line:
// a long run's formatted trace is never held whole.
func HashTrace(rs []Record) string {
	h := sha256.New()
	var b bytes.Buffer
	for _, r := range rs {
		b.Reset()
		r.appendTo(&b)
		b.WriteByte('\n')
		h.Write(b.Bytes())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// kv builds fields from alternating keys and values.
func kv(pairs ...any) []Field {
	fs := make([]Field, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		fs = append(fs, Field{K: pairs[i].(string), V: fmtVal(pairs[i+1])})
	}
	return fs
}

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
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}
