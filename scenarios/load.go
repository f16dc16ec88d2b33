package scenarios

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/deliverysim/deliverysim/internal/filekind"
)

// Error is a problem with a scenario file, located: which file, which line,
// which field (a path like "faults.schedule[2].until").
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %s: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// maxFileSize keeps a hostile or mistaken file (a trace, say) from being
// parsed at all.
const maxFileSize = 4 << 20

// LoadFile reads and validates a scenario file (YAML or JSON).
// Only regular files are read, and at most maxFileSize+1 bytes of them: a
// device (/dev/zero) or a FIFO would otherwise be read until memory runs
// out, or block for ever.
func LoadFile(path string) (*Scenario, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	return Load(path, data)
}

func readBounded(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, &Error{File: path, Msg: fmt.Sprintf("not a regular file (a %s, %v); give a scenario file's path", filekind.Of(st.Mode()), st.Mode())}
	}
	// O_NONBLOCK keeps the open itself from waiting on a FIFO swapped in
	// after the Stat; the read then fails instead of blocking.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, &Error{File: path, Msg: "not a regular file; give a scenario file's path"}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("file is larger than %d bytes, the most a scenario may be", maxFileSize)}
	}
	return data, nil
}

// Load parses and validates a scenario. name is used in error messages.
// Every error names the line and the field it is about.
func Load(name string, data []byte) (*Scenario, error) {
	if len(data) > maxFileSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("file is %d bytes; a scenario is at most %d", len(data), maxFileSize)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(name, data, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &Error{File: name, Line: 1, Msg: "the file is empty; a scenario needs at least name, title and topology"}
	}
	d := &decoder{file: name}
	s := d.scenario(doc.Content[0])
	if d.err != nil {
		return nil, d.err
	}
	s.Path = name
	if err := s.validate(); err != nil {
		var e *Error
		if errors.As(err, &e) && e.File == "" {
			e.File = name
		}
		return nil, err
	}
	return s, nil
}

// syntaxError turns a YAML syntax error ("yaml: line 3: ...") into an
// Error with the line pulled out, and the key written on that line (if
// any) as the field.
func syntaxError(name string, data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ":"); ok {
			if n, e := strconv.Atoi(num); e == nil {
				line, msg = n, strings.TrimSpace(tail)
			}
		}
	}
	lines := strings.Split(string(data), "\n")
	if line == 0 {
		// The parser names no line for a file that ends inside something
		// (an unclosed quote or bracket): that is the last line.
		line = len(lines)
		for line > 1 && strings.TrimSpace(lines[line-1]) == "" {
			line--
		}
	}
	field := ""
	if line >= 1 && line <= len(lines) {
		text := strings.TrimLeft(strings.TrimSpace(lines[line-1]), "- ")
		if key, _, ok := strings.Cut(text, ":"); ok && key != "" && !strings.ContainsAny(key, " {[\"'") {
			field = key
		}
	}
	return &Error{File: name, Line: line, Field: field, Msg: "not valid YAML or JSON: " + msg}
}

// decoder walks the YAML node tree by hand so that every complaint can name
// the line and the field; the first complaint stops it.
type decoder struct {
	file string
	err  error
}

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	if d.err != nil {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.err = &Error{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

// object is one mapping being decoded: its keys, checked against the
// fields it may have.
type object struct {
	d    *decoder
	n    *yaml.Node
	path string
	keys map[string]*yaml.Node
}

func (d *decoder) object(n *yaml.Node, path string, known ...string) *object {
	o := &object{d: d, n: n, path: path, keys: map[string]*yaml.Node{}}
	if d.err != nil || n == nil {
		return o
	}
	if n.Kind == yaml.AliasNode {
		d.fail(n, path, "anchors and aliases are not supported; write the value out")
		return o
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping (key: value lines), got %s", kindName(n))
		return o
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "keys must be plain names")
			return o
		}
		name := k.Value
		field := join(path, name)
		if !slices.Contains(known, name) {
			d.fail(k, field, "unknown field %q (known here: %s)", name, strings.Join(known, ", "))
			return o
		}
		if _, dup := o.keys[name]; dup {
			d.fail(k, field, "given twice")
			return o
		}
		if v.Kind == yaml.AliasNode {
			d.fail(v, field, "anchors and aliases are not supported; write the value out")
			return o
		}
		o.keys[name] = v
	}
	return o
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (o *object) has(key string) bool { _, ok := o.keys[key]; return ok }

func (o *object) line() int {
	if o.n == nil {
		return 0
	}
	return o.n.Line
}

// scalar returns key's scalar node, or nil (with a complaint if it is not a
// scalar).
func (o *object) scalar(key string) *yaml.Node {
	v, ok := o.keys[key]
	if !ok || o.d.err != nil {
		return nil
	}
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		o.d.fail(v, join(o.path, key), "want a single value, got %s", kindName(v))
		return nil
	}
	return v
}

func (o *object) require(keys ...string) {
	for _, k := range keys {
		if !o.has(k) {
			o.d.fail(o.n, join(o.path, k), "is required")
			return
		}
	}
}

func (o *object) str(key string) string {
	if v := o.scalar(key); v != nil {
		return v.Value
	}
	return ""
}

func (o *object) integer(key string, min, max int64) int64 {
	v := o.scalar(key)
	if v == nil {
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		o.d.fail(v, join(o.path, key), "%q is not a whole number", v.Value)
		return 0
	}
	if n < min || n > max {
		o.d.fail(v, join(o.path, key), "%d is out of range [%d, %d]", n, min, max)
		return 0
	}
	return n
}

func (o *object) uint(key string) uint64 {
	v := o.scalar(key)
	if v == nil {
		return 0
	}
	n, err := strconv.ParseUint(v.Value, 10, 64)
	if err != nil {
		o.d.fail(v, join(o.path, key), "%q is not a non-negative whole number", v.Value)
		return 0
	}
	return n
}

func (o *object) boolean(key string) bool {
	v := o.scalar(key)
	if v == nil {
		return false
	}
	switch strings.ToLower(v.Value) {
	case "true", "yes", "on":
		return true
	case "false", "no", "off":
		return false
	}
	o.d.fail(v, join(o.path, key), "%q is not true or false", v.Value)
	return false
}

func (o *object) boolPtr(key string) *bool {
	if !o.has(key) {
		return nil
	}
	b := o.boolean(key)
	return &b
}

func (o *object) float(key string) *float64 {
	v := o.scalar(key)
	if v == nil {
		return nil
	}
	f, err := strconv.ParseFloat(v.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		o.d.fail(v, join(o.path, key), "%q is not a number", v.Value)
		return nil
	}
	return &f
}

// durationSyntax is what time.ParseDuration reads, whatever the size.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// parseDuration reads "90s", "1m30s", "250ms", "7d" (whole days), "0", and,
// if allowNever, "never".
func parseDuration(s string, allowNever bool) (Duration, error) {
	s = strings.TrimSpace(s)
	if allowNever && s == "never" {
		return Never, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err == nil && n > 100000 || errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%q is out of range (at most 100000d)", s)
		}
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a duration (whole days like 7d, or like 90s, 1m30s, 2h)", s)
		}
		return Duration(time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		// Well-formed but past time.Duration's range (about 292 years):
		// not "not a duration".
		if durationSyntax.MatchString(s) {
			return 0, fmt.Errorf("%q is out of range (at most 2562047h, about 292 years)", s)
		}
		hint := "like 90s, 1m30s, 250ms, 2h or 7d"
		if _, e := strconv.ParseFloat(s, 64); e == nil {
			hint = "give it a unit, like " + s + "s"
		}
		return 0, fmt.Errorf("%q is not a duration (%s)", s, hint)
	}
	return Duration(d), nil
}

func (o *object) duration(key string, allowNever, allowNegative bool) Duration {
	v := o.scalar(key)
	if v == nil {
		return 0
	}
	d, err := parseDuration(v.Value, allowNever)
	if err != nil {
		o.d.fail(v, join(o.path, key), "%v", err)
		return 0
	}
	if d < 0 && !allowNegative {
		o.d.fail(v, join(o.path, key), "%s is negative", v.Value)
		return 0
	}
	return d
}

// list returns key's sequence items (nil if absent).
func (o *object) list(key string) []*yaml.Node {
	v, ok := o.keys[key]
	if !ok || o.d.err != nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return nil
		}
		o.d.fail(v, join(o.path, key), "want a list, got %s", kindName(v))
		return nil
	}
	for _, it := range v.Content {
		if it.Kind == yaml.AliasNode {
			o.d.fail(it, join(o.path, key), "anchors and aliases are not supported; write the value out")
			return nil
		}
	}
	return v.Content
}

func (o *object) strings(key string) []string {
	var out []string
	for i, it := range o.list(key) {
		if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
			o.d.fail(it, fmt.Sprintf("%s[%d]", join(o.path, key), i), "want a single value, got %s", kindName(it))
			return nil
		}
		out = append(out, it.Value)
	}
	return out
}

func (o *object) child(key string, known ...string) *object {
	v, ok := o.keys[key]
	if !ok {
		return &object{d: o.d, path: join(o.path, key), keys: map[string]*yaml.Node{}}
	}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return &object{d: o.d, n: v, path: join(o.path, key), keys: map[string]*yaml.Node{}}
	}
	return o.d.object(v, join(o.path, key), known...)
}

func elem(path, key string, i int) string { return fmt.Sprintf("%s[%d]", join(path, key), i) }

func (d *decoder) scenario(n *yaml.Node) *Scenario {
	s := &Scenario{}
	o := d.object(n, "", "name", "title", "source", "description", "seed", "topology", "workload",
		"engine", "receiver", "faults", "expect", "catches")
	o.require("name", "title", "topology")
	s.Name = o.str("name")
	s.Title = o.str("title")
	s.Source = o.str("source")
	s.Description = o.str("description")
	s.Seed = o.uint("seed")
	s.Topology = d.topology(o.child("topology", "nodes", "streams", "bots", "members", "sources"))
	s.Workload = d.workload(o.child("workload", "produce", "fault_window", "liveness", "hol_bound", "batch_max",
		"requeue_dead", "requeue_every", "cursor_write_max", "restart_min", "restart_max", "result_batch", "resume_overlap", "events", "snapshots", "clock_jumps"))
	s.Engine = d.engine(o.child("engine", engineKeys()...))
	r := o.child("receiver", "window", "max_entries", "tolerance")
	s.Receiver = Receiver{Window: r.duration("window", false, false), MaxEntries: int(r.integer("max_entries", 1, 1<<30)),
		Tolerance: r.duration("tolerance", false, false)}
	f := o.child("faults", "random", "schedule")
	s.Faults.Random = f.str("random")
	if v := f.scalar("random"); v != nil {
		s.Faults.RandomLine = v.Line
	}
	for i, it := range f.list("schedule") {
		s.Faults.Schedule = append(s.Faults.Schedule, d.fault(it, elem("faults", "schedule", i)))
	}
	e := o.child("expect", "violations")
	s.Expect = Expect{Violations: e.strings("violations"), Line: e.line()}
	for i, it := range o.list("catches") {
		c := d.object(it, elem("", "catches", i), "bug", "invariant")
		c.require("bug", "invariant")
		s.Catches = append(s.Catches, Catch{Bug: c.str("bug"), Invariant: c.str("invariant"), Line: it.Line})
	}
	return s
}

func (d *decoder) span(o *object, key string) *Span {
	v, ok := o.keys[key]
	if !ok || d.err != nil {
		return nil
	}
	field := join(o.path, key)
	parse := func(n *yaml.Node) Duration {
		if n.Kind != yaml.ScalarNode {
			d.fail(n, field, "want a duration, got %s", kindName(n))
			return 0
		}
		x, err := parseDuration(n.Value, false)
		if err == nil && x < 0 {
			err = fmt.Errorf("%s is negative", n.Value)
		}
		if err != nil {
			d.fail(n, field, "%v", err)
		}
		return x
	}
	switch {
	case v.Kind == yaml.ScalarNode:
		x := parse(v)
		return &Span{x, x}
	case v.Kind == yaml.SequenceNode && len(v.Content) == 2:
		a, b := parse(v.Content[0]), parse(v.Content[1])
		if d.err == nil && b < a {
			d.fail(v, field, "the range [%s, %s] is empty; write [min, max]", a, b)
		}
		return &Span{a, b}
	}
	d.fail(v, field, "want a duration or a [min, max] pair, got %s", kindName(v))
	return nil
}

func (d *decoder) topology(o *object) Topology {
	t := Topology{Nodes: int(o.integer("nodes", 1, 8))}
	if o.n != nil {
		o.require("streams", "bots")
	}
	for i, it := range o.list("streams") {
		so := d.object(it, elem(o.path, "streams", i), "name", "kind", "seal_every", "producers", "latency",
			"first_miniblock", "stamp_seconds")
		so.require("name")
		st := Stream{Name: so.str("name"), Kind: so.str("kind"), SealEvery: so.duration("seal_every", false, false),
			Latency: d.span(so, "latency"), FirstMiniblock: so.integer("first_miniblock", 0, 1<<62),
			StampSeconds: so.boolean("stamp_seconds"), Line: it.Line}
		for j, p := range so.list("producers") {
			if p.Kind != yaml.ScalarNode {
				d.fail(p, elem(so.path, "producers", j), "want a clock skew like -90s, got %s", kindName(p))
				break
			}
			x, err := parseDuration(p.Value, false)
			if err != nil {
				d.fail(p, elem(so.path, "producers", j), "%v", err)
				break
			}
			st.Producers = append(st.Producers, x)
		}
		t.Streams = append(t.Streams, st)
	}
	for i, it := range o.list("bots") {
		bo := d.object(it, elem(o.path, "bots", i), "id", "latency", "secret", "receiver", "handler_fail_rate", "whsec", "forge_rate", "rotate_at")
		bo.require("id")
		b := Bot{ID: bo.str("id"), Latency: d.span(bo, "latency"), Secret: bo.str("secret"), Receiver: bo.str("receiver"),
			Whsec: bo.boolean("whsec"), RotateAt: bo.duration("rotate_at", false, false), Line: it.Line}
		if _, ok := rxEntries[b.Receiver]; !ok {
			d.fail(it, elem(o.path, "bots", i)+".receiver", "%q is not handle, handler or middleware", b.Receiver)
		}
		if f := bo.float("handler_fail_rate"); f != nil {
			if *f < 0 || *f >= 1 {
				d.fail(it, elem(o.path, "bots", i)+".handler_fail_rate", "%v is not in [0, 1)", *f)
			}
			b.HandlerFailRate = *f
		}
		if f := bo.float("forge_rate"); f != nil {
			if *f < 0 || *f >= 1 {
				d.fail(it, elem(o.path, "bots", i)+".forge_rate", "%v is not in [0, 1)", *f)
			}
			b.ForgeRate = *f
		}
		t.Bots = append(t.Bots, b)
	}
	for i, it := range o.list("members") {
		mo := d.object(it, elem(o.path, "members", i), "stream", "bot")
		mo.require("stream", "bot")
		t.Members = append(t.Members, Member{Stream: mo.str("stream"), Bot: mo.str("bot"), Line: it.Line})
	}
	for i, it := range o.list("sources") {
		so := d.object(it, elem(o.path, "sources", i), "name", "apps", "scan_every")
		so.require("name", "apps")
		t.Sources = append(t.Sources, Source{Name: so.str("name"), Apps: so.strings("apps"),
			ScanEvery: so.duration("scan_every", false, false), Line: it.Line})
	}
	return t
}

func (d *decoder) workload(o *object) Workload {
	w := Workload{
		Produce:        o.duration("produce", false, false),
		FaultWindow:    o.duration("fault_window", false, false),
		Liveness:       o.duration("liveness", false, false),
		HOLBound:       o.duration("hol_bound", false, false),
		BatchMax:       int(o.integer("batch_max", 1, 100000)),
		RequeueDead:    o.boolean("requeue_dead"),
		RequeueEvery:   o.duration("requeue_every", false, false),
		CursorWriteMax: o.duration("cursor_write_max", false, false),
		ResultBatch:    o.duration("result_batch", false, false),
		ResumeOverlap:  int(o.integer("resume_overlap", 0, 1000)),
		RestartMin:     o.duration("restart_min", false, false),
		RestartMax:     o.duration("restart_max", false, false),
	}
	for i, it := range o.list("events") {
		eo := d.object(it, elem(o.path, "events", i), "stream", "at", "id", "producer", "count", "every",
			"payload", "payload_base64")
		eo.require("stream", "at")
		e := Event{
			Stream: eo.str("stream"), At: eo.duration("at", false, false), ID: eo.str("id"),
			Producer: int(eo.integer("producer", 0, 1000)), Count: int(eo.integer("count", 1, 100000)),
			Every: eo.duration("every", false, false), Line: it.Line,
		}
		for _, k := range []string{"payload", "payload_base64"} {
			if eo.has(k) {
				v := eo.str(k)
				if k == "payload" {
					e.Payload = &v
				} else {
					if _, err := base64.StdEncoding.DecodeString(v); err != nil && d.err == nil {
						d.fail(eo.keys[k], join(eo.path, k), "is not standard base64: %v", err)
					}
					e.PayloadBase64 = &v
				}
			}
		}
		if e.Payload != nil && e.PayloadBase64 != nil && d.err == nil {
			d.fail(eo.keys["payload"], join(eo.path, "payload"), "give payload or payload_base64, not both")
		}
		w.Events = append(w.Events, e)
	}
	for i, it := range o.list("snapshots") {
		so := d.object(it, elem(o.path, "snapshots", i), "source", "at", "items")
		so.require("source", "at", "items")
		snap := Snapshot{Source: so.str("source"), At: so.duration("at", false, false), Items: map[string]string{}, Line: it.Line}
		if v, ok := so.keys["items"]; ok && d.err == nil {
			field := join(so.path, "items")
			switch {
			case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			case v.Kind != yaml.MappingNode:
				d.fail(v, field, "want a mapping of item to version, like {file.txt: sha1}, got %s", kindName(v))
			default:
				for j := 0; j+1 < len(v.Content); j += 2 {
					k, val := v.Content[j], v.Content[j+1]
					if k.Kind != yaml.ScalarNode || val.Kind != yaml.ScalarNode || val.Tag == "!!null" {
						d.fail(k, field, "each item maps a name to a version")
						break
					}
					if _, dup := snap.Items[k.Value]; dup {
						d.fail(k, field+"."+k.Value, "given twice")
						break
					}
					snap.Items[k.Value] = val.Value
				}
			}
		}
		w.Snapshots = append(w.Snapshots, snap)
	}
	if o.has("clock_jumps") {
		co := o.child("clock_jumps", "bound", "jumps")
		co.require("bound")
		cj := &ClockJumps{Bound: co.duration("bound", false, false)}
		for i, it := range co.list("jumps") {
			jo := d.object(it, elem(co.path, "jumps", i), "at", "node", "by", "step")
			jo.require("at", "node")
			cj.Jumps = append(cj.Jumps, ClockJump{At: jo.duration("at", false, false), Node: int(jo.integer("node", 0, 1000)),
				By: jo.duration("by", false, true), Step: jo.boolean("step")})
		}
		w.ClockJumps = cj
	}
	return w
}

func (d *decoder) fault(n *yaml.Node, path string) Fault {
	o := d.object(n, path, "kind", "at", "until", "node", "bot", "stream", "event", "attempt", "after", "method",
		"restart_after", "offset", "drift", "incarnation", "delay", "status", "order", "member", "back", "never", "call")
	o.require("kind")
	f := Fault{
		Kind: o.str("kind"), At: o.duration("at", false, false), Until: o.duration("until", true, false),
		Node: o.str("node"), Bot: o.str("bot"), Stream: o.str("stream"), Event: o.str("event"),
		Attempt: int(o.integer("attempt", 1, 1<<20)), After: o.str("after"), Method: o.str("method"),
		RestartAfter: o.duration("restart_after", false, false), Offset: o.duration("offset", false, true),
		Drift: o.duration("drift", false, true), Incarnation: int(o.integer("incarnation", 1, 1<<20)),
		Delay: o.duration("delay", false, false), Status: int(o.integer("status", 100, 599)),
		Member: o.boolPtr("member"), Back: int(o.integer("back", 1, 1<<20)), Never: o.boolean("never"), Call: int(o.integer("call", 0, 1<<20)), Line: n.Line,
	}
	for i, it := range o.list("order") {
		if it.Kind != yaml.ScalarNode {
			d.fail(it, elem(path, "order", i), "want a position, got %s", kindName(it))
			break
		}
		v, err := strconv.Atoi(it.Value)
		if err != nil || v < 0 || v > 1<<20 {
			d.fail(it, elem(path, "order", i), "%q is not a position in the batch (0, 1, ...)", it.Value)
			break
		}
		f.Order = append(f.Order, v)
	}
	return f
}
