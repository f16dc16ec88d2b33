package sim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// Corner is one class of corner-case input (issue 9, class 7): values that
// an engine or a store keys on, compares or encodes, drawn where they
// collide, tie or sit on an encoding boundary. Each world draws its set of
// classes like the fault plan draws its kinds (swarm testing), so a bug
// that only one class exposes is not drowned by the others.
type Corner uint16

const (
	// CornerCreatedAtTies: timestamp streams' producers stamp created_at
	// in whole seconds (as Nostr does) with whole-second skews, and often
	// produce twice in the same instant, so equal created_at with
	// different ids is common, within a batch and across batches, producers,
	// nodes and restarts; batches are small so ties straddle them.
	CornerCreatedAtTies Corner = 1 << iota
	// CornerBursts: some events of every stream are produced at a few
	// shared instants: the same virtual time (and so the same enqueue
	// CreatedAt on a node) across streams, bots and nodes.
	CornerBursts
	// CornerNumericIDs: ids that are decimal numbers counting across digit
	// boundaries (9/10, 99/100, ...), some with leading zeros, so that
	// bytewise and numeric order disagree and numerically equal ids differ.
	CornerNumericIDs
	// CornerOddIDs: ids with bytes that need escaping in JSON, SQL,
	// LIKE patterns and headers (quotes, backslash, %, _, spaces), unicode,
	// pairs equal under case folding or unicode normalization, and ids
	// that are prefixes of other ids.
	CornerOddIDs
	// CornerEmptyPayloads: some payloads are empty.
	CornerEmptyPayloads
	// CornerLargePayloads: a few payloads are tens to hundreds of KiB.
	CornerLargePayloads
	// CornerSharedPayloads: many events carry byte-identical payloads,
	// within a stream and across streams.
	CornerSharedPayloads
	// CornerOddPayloads: payloads with JSON escapes, SQL metacharacters,
	// NUL and invalid UTF-8 bytes, CR/LF, a BOM, U+2028.
	CornerOddPayloads
	// CornerPositions: log streams start at miniblock numbers just below
	// a digit boundary or a width limit (2^31, 2^32, 2^53), and some seal
	// rarely so minipool indexes cross 9/10 and 99/100.
	CornerPositions

	cornerEnd
)

var cornerNames = []string{
	"created-at-ties", "bursts", "numeric-ids", "odd-ids", "empty-payloads",
	"large-payloads", "shared-payloads", "odd-payloads", "position-boundaries",
}

// AllCorners is every corner class.
const AllCorners = cornerEnd - 1

// CornerClasses lists every class, in a fixed order.
func CornerClasses() []Corner {
	var out []Corner
	for c := Corner(1); c < cornerEnd; c <<= 1 {
		out = append(out, c)
	}
	return out
}

// Has says whether every class of o is in c.
func (c Corner) Has(o Corner) bool { return c&o == o && o != 0 }

// Name is the class's stable name; a set gives its names joined by ",".
func (c Corner) String() string {
	var names []string
	for i, k := range CornerClasses() {
		if c&k != 0 {
			names = append(names, cornerNames[i])
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ParseCorners reads a set from its String form ("none", "all" or names
// joined by commas).
func ParseCorners(s string) (Corner, error) {
	switch s {
	case "", "none":
		return 0, nil
	case "all":
		return AllCorners, nil
	}
	var c Corner
	for _, name := range strings.Split(s, ",") {
		i := slices.Index(cornerNames, strings.TrimSpace(name))
		if i < 0 {
			return 0, fmt.Errorf("unknown corner class %q (use none, all or a comma list of %s)", name, strings.Join(cornerNames, ", "))
		}
		c |= 1 << i
	}
	return c, nil
}

// cornerRate is the chance that a world draws a class.
const cornerRate = 0.35

// CornersOf is the set of corner classes seed draws: each class with
// probability cornerRate, from a stream of its own, so a world that draws
// none is exactly the world this seed drew before corners existed.
func CornersOf(seed uint64) Corner {
	r := actorRand(seed, "workload/corners")
	var c Corner
	for _, k := range CornerClasses() {
		if r.Float64() < cornerRate {
			c |= k
		}
	}
	return c
}

// applyCorners gives w the classes c and the world-level values they
// need: burst instants, the first numeric id, stamping, miniblock numbers.
// They come from a stream of their own, drawn in the same order whatever c
// holds, so each class's values do not depend on which others are on.
func applyCorners(seed uint64, w *Workload, c Corner) {
	r := actorRand(seed, "workload/corners/values")
	w.Corners = c
	bursts := make([]time.Duration, 1+r.IntN(4))
	for i := range bursts {
		// Whole seconds: a tie in created_at needs a tie in time.
		bursts[i] = between(r, time.Second, w.Produce).Truncate(time.Second)
	}
	slices.Sort(bursts)
	if c.Has(CornerBursts) || c.Has(CornerCreatedAtTies) {
		w.BurstAt = bursts
	}
	idBases := []int64{8, 98, 998, 9_998, 99_999_998, 1<<31 - 4, 1<<53 - 4}
	if base := idBases[r.IntN(len(idBases))]; c.Has(CornerNumericIDs) {
		w.NumericIDBase = base
	}
	if small, batch := r.IntN(2) == 0, 1+r.IntN(3); small && c.Has(CornerCreatedAtTies) {
		w.BatchMax = batch
	}
	blockBases := []int64{0, 8, 98, 998, 999_999_998, 1<<31 - 3, 1<<32 - 3, 1<<53 - 3}
	for i := range w.Streams {
		s := &w.Streams[i]
		base, long := blockBases[r.IntN(len(blockBases))], r.IntN(2) == 0
		switch {
		case s.Kind == engine.TimestampStream && c.Has(CornerCreatedAtTies):
			s.StampSeconds = true
			for p := range s.ProducerSkews {
				s.ProducerSkews[p] = s.ProducerSkews[p].Round(time.Second)
			}
		case s.Kind == engine.LogStream && c.Has(CornerPositions):
			s.FirstMiniblock = base
			if long {
				// One long minipool: indexes cross 9/10 and 99/100.
				s.SealEvery = w.Produce + time.Minute
			}
		}
	}
}

// cornerTimes moves some production times onto the world's burst instants
// (and, for created-at ties, onto the previous event's instant). times is
// sorted before and after.
func cornerTimes(r *rand.Rand, w *Workload, spec *StreamSpec, times []time.Duration) {
	if len(w.BurstAt) == 0 {
		return
	}
	ties := w.Corners.Has(CornerCreatedAtTies) && spec.Kind == engine.TimestampStream
	for i := range times {
		switch {
		case r.Float64() < 0.2:
			times[i] = w.BurstAt[r.IntN(len(w.BurstAt))]
		case ties && i > 0 && r.Float64() < 0.3:
			times[i] = times[i-1]
		}
	}
	slices.Sort(times)
}

// oddIDParts are id fragments that need escaping or collide somewhere:
// JSON and SQL quoting, LIKE wildcards, header separators, unicode in
// several scripts and normalization forms.
var oddIDParts = []string{
	`o'brien`, `say "hi"`, `back\slash`, `100%`, `a_b`, `semi;colon`, `sp ace`,
	`comma,sep`, `k=v`, `dot.ted`, `slash/ed`, `--`, `/*c*/`, `Zed`, `zed`,
	"caf\u00e9", "\u65e5\u672c", "\U0001F600", "\u00a0nbsp", "\u00df", "\u0130",
}

// cornerIDs makes the run's unusual event ids. Ids stay unique across the
// whole run (the store keys messages and the receiver dedups by event id,
// so two events never share one) and valid UTF-8 without control bytes
// (they travel in a header and in text columns).
type cornerIDs struct {
	num  int64
	used map[string]bool
	twin []string // ids whose case or normalization twin is still to come
}

func (c *cornerIDs) fresh(id string) bool { return id != "" && !c.used[id] }

// next returns an unusual id for an event of the stream, or "" to keep
// the drawn one.
func (c *cornerIDs) next(r *rand.Rand, w *Workload) string {
	if w.Corners.Has(CornerNumericIDs) && r.Float64() < 0.5 {
		c.num++
		id := strconv.FormatInt(c.num, 10)
		if r.IntN(8) == 0 {
			// Numerically equal to an id of its own or a later one.
			id = "0" + id
		}
		if c.fresh(id) {
			return id
		}
	}
	if w.Corners.Has(CornerOddIDs) && r.Float64() < 0.4 {
		if len(c.twin) > 0 && r.IntN(2) == 0 {
			t := c.twin[0]
			c.twin = c.twin[1:]
			if c.fresh(t) {
				return t
			}
		}
		suffix := strconv.FormatUint(r.Uint64()&0xffffff, 36)
		id := "ev-" + oddIDParts[r.IntN(len(oddIDParts))] + "-" + suffix
		switch r.IntN(4) {
		case 0:
			c.twin = append(c.twin, strings.ToUpper(id))
		case 1:
			c.twin = append(c.twin, id+"0") // id is a prefix of its twin
		case 2:
			// The same text decomposed (NFD): e + combining acute.
			c.twin = append(c.twin, "ev-cafe\u0301-"+suffix)
			id = "ev-caf\u00e9-" + suffix
		}
		if c.fresh(id) {
			return id
		}
	}
	return ""
}

// sharedPayloads are byte-identical bodies that many events carry.
var sharedPayloads = [][]byte{
	[]byte(`{}`), []byte(`{"type":"ping"}`), []byte(`null`), []byte(`[]`),
	[]byte(`{"type":"message","text":"hello"}`),
}

// oddPayloads need escaping or careful byte handling on every layer.
var oddPayloads = [][]byte{
	[]byte(`{"text":"quote \" backslash \\ slash \/ tab \t newline \n nul \u0000 \ud83d\ude00"}`),
	[]byte(`{"sql":"'; DROP TABLE messages; --","like":"100% _x_"}`),
	[]byte("{\"raw\":\"caf\u00e9 \u65e5\u672c \U0001F600 \u2028 \u2029\"}"),
	[]byte("\xef\xbb\xbf{\"bom\":true}"),
	[]byte("line one\r\nline two\r\n\r\n"),
	{0x00, 0x01, 0xff, 0xfe, 0x80, '"', '\\', 0x00},
	[]byte("</script><script>alert(1)</script>"),
}

// cornerPayload returns an unusual payload for event seq of the stream, or
// nil to keep the drawn one. Large payloads are capped per stream so a
// sweep's memory stays bounded.
func cornerPayload(r *rand.Rand, w *Workload, st *stream, seq int, id string) []byte {
	if w.Corners.Has(CornerEmptyPayloads) && r.Float64() < 0.15 {
		return []byte{}
	}
	if w.Corners.Has(CornerLargePayloads) && st.large < 4 && r.Float64() < 0.06 {
		st.large++
		n := 16<<10 + r.IntN(112<<10)
		var chunk [48]byte
		for i := range chunk {
			chunk[i] = 'a' + byte(r.IntN(26))
		}
		head := fmt.Appendf(nil, `{"stream":%q,"seq":%d,"blob":"`, st.spec.Name, seq)
		body := bytes.Repeat(chunk[:], n/len(chunk)+1)[:n]
		return append(append(head, body...), `"}`...)
	}
	if w.Corners.Has(CornerSharedPayloads) && r.Float64() < 0.3 {
		return sharedPayloads[r.IntN(len(sharedPayloads))]
	}
	if w.Corners.Has(CornerOddPayloads) && r.Float64() < 0.25 {
		p := oddPayloads[r.IntN(len(oddPayloads))]
		if r.IntN(2) == 0 {
			p = append(slices.Clip(p), id...)
		}
		return p
	}
	return nil
}

// Input traits: what an event's values are, whatever made them. The
// coverage catalogue counts the events with each trait that a bot's handler
// ran, so an explicit scenario's inputs count as well as generated ones.
type trait uint16

const (
	traitCreatedAtTie trait = 1 << iota // equal created_at, other id, same stream
	traitSameInstant                    // produced in the same instant as an event of another stream
	traitNumericID                      // decimal id of a digit count (or leading zero) not seen before
	traitOddID                          // an id byte outside [A-Za-z0-9-]
	traitUnicodeID                      // a non-ASCII id
	traitFoldedID                       // equal to another id under case folding or NFC
	traitEmptyPayload
	traitLargePayload
	traitSharedPayload // byte-identical to another event's payload
	traitOddPayload    // bytes that need escaping: quotes, backslash, control, invalid UTF-8
	traitIndexBoundary // log position index 10, 100 or 1000
	traitBlockBoundary // miniblock number a power of ten, or past 2^31, 2^32, 2^53
	traitEnd
)

var traitNames = []string{
	"input/created-at-tie", "input/same-instant-across-streams", "input/numeric-id-digit-boundary",
	"input/id-needs-escaping", "input/id-unicode", "input/id-case-or-normalization-twin",
	"input/payload-empty", "input/payload-large", "input/payload-identical",
	"input/payload-needs-escaping", "input/position-index-digit-boundary", "input/position-miniblock-boundary",
}

// traitBook remembers what the traits of later events are judged against.
type traitBook struct {
	majors   map[string]map[int64]string // stream -> created_at ms -> an id
	instant  time.Time
	streams  map[string]bool // streams that produced at instant
	digits   map[int]bool    // digit counts of numeric ids seen
	folded   map[string]bool
	payloads map[string]bool
}

func newTraitBook() *traitBook {
	return &traitBook{majors: map[string]map[int64]string{}, streams: map[string]bool{},
		digits: map[int]bool{}, folded: map[string]bool{}, payloads: map[string]bool{}}
}

// foldID is id with case folded and the one decomposition the generator
// makes composed again.
func foldID(id string) string {
	return strings.ToLower(strings.ReplaceAll(id, "e\u0301", "\u00e9"))
}

func (tb *traitBook) traits(now time.Time, ev engine.Event, log bool) trait {
	var t trait
	if !log {
		m := tb.majors[ev.Stream]
		if m == nil {
			m = map[int64]string{}
			tb.majors[ev.Stream] = m
		}
		if other, ok := m[ev.Pos.Major]; ok && other != ev.ID {
			t |= traitCreatedAtTie
		}
		m[ev.Pos.Major] = ev.ID
	}
	if !now.Equal(tb.instant) {
		tb.instant = now
		clear(tb.streams)
	}
	for s := range tb.streams {
		if s != ev.Stream {
			t |= traitSameInstant
			break
		}
	}
	tb.streams[ev.Stream] = true
	if isDigits(ev.ID) {
		if !tb.digits[len(ev.ID)] || ev.ID[0] == '0' {
			t |= traitNumericID
		}
		tb.digits[len(ev.ID)] = true
	}
	for i := 0; i < len(ev.ID); i++ {
		c := ev.ID[i]
		if c >= 0x80 {
			t |= traitUnicodeID
		} else if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			t |= traitOddID
		}
	}
	f := foldID(ev.ID)
	if tb.folded[f] {
		t |= traitFoldedID
	}
	tb.folded[f] = true
	switch {
	case len(ev.Payload) == 0:
		t |= traitEmptyPayload
	case len(ev.Payload) >= 16<<10:
		t |= traitLargePayload
	}
	// Large payloads are judged by their size alone: copying or scanning
	// hundreds of KiB per event would cost more than the run.
	if len(ev.Payload) <= 4<<10 {
		if tb.payloads[string(ev.Payload)] {
			t |= traitSharedPayload
		}
		tb.payloads[string(ev.Payload)] = true
		if !utf8.Valid(ev.Payload) || bytes.ContainsAny(ev.Payload, "\\\x00\r\n\u2028") || bytes.HasPrefix(ev.Payload, []byte("\xef\xbb\xbf")) {
			t |= traitOddPayload
		}
	}
	if log {
		switch ev.Pos.Minor {
		case 10, 100, 1000:
			t |= traitIndexBoundary
		}
		if isPow10(ev.Pos.Major) || ev.Pos.Major >= 1<<31 {
			t |= traitBlockBoundary
		}
	}
	return t
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isPow10(n int64) bool {
	if n < 10 {
		return false
	}
	for n%10 == 0 {
		n /= 10
	}
	return n == 1
}
