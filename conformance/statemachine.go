package conformance

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model"
)

// The StateMachine group: rapid draws random sequences of store calls over
// a deliberately tiny key space (so keys collide, leases clash and
// boundaries are hit), runs each call on the backend and on model.Store,
// and compares every result and, after every step, the whole observable
// state. A failure is shrunk to a minimal sequence and printed op by op.
//
// Reproduce with the seed a failure prints, in the flags of the entry
// point that ran it (settings.replayRapid: --rapid-seed for certify and
// Main, RapidSeed for Check, -rapid.seed under go test); no fail file is
// read or written (see freshRun).

func stateMachineChecks() []check {
	return []check{{
		group: GroupStateMachine,
		name:  "Random",
		rule:  "so that the same sequence of calls gives the same results on every backend and under the simulator's virtual clock.",
		skip:  func(Factory) string { return "" },
		run:   runStateMachine,
	}}
}

// rapidMu serialises the suite's rapid runs: rapid reads its settings from
// process-wide flags, which Check and the options change for the duration
// of one run.
var rapidMu sync.Mutex

var testingInit sync.Once

// initTestingFlags lets rapid run outside a test binary (deliverysim
// certify, an implementer's own main): rapid calls testing.Short, which
// panics until testing.Init has registered the test flags and the command
// line has been parsed. In a test binary both have happened already.
// Parsing an empty argument list only marks flag.CommandLine parsed; a
// program that calls flag.Parse later still parses its own arguments.
func initTestingFlags() {
	testingInit.Do(func() {
		if testing.Testing() {
			return
		}
		testing.Init()
		if !flag.Parsed() {
			_ = flag.CommandLine.Parse(nil)
		}
	})
}

func withRapidFlags(t testing.TB, set map[string]string, fn func()) {
	t.Helper()
	initTestingFlags()
	rapidMu.Lock()
	defer rapidMu.Unlock()
	for name, v := range set {
		fl := flag.Lookup(name)
		if fl == nil {
			t.Fatalf("conformance: rapid flag -%s is not registered (is pgregory.net/rapid v1.3 linked?)", name)
		}
		old := fl.Value.String()
		if err := fl.Value.Set(v); err != nil {
			t.Fatalf("conformance: setting -%s=%s: %v", name, v, err)
		}
		defer func() { _ = fl.Value.Set(old) }()
	}
	fn()
}

// freshRun names each rapid run uniquely. rapid replays, before anything
// else, every fail file under testdata/rapid/<test name>/ and stops at the
// first that fails, so a file left by an earlier run (or checked in) would
// decide what a later run checks; a name no file can match keeps every
// run fresh. Fail files are never written either: a failure prints the
// seed that replays it (RapidSeed, certify --rapid-seed, -rapid.seed).
var freshRun atomic.Uint64

// rapidTB is t under a name no fail file matches. It also rewrites
// rapid's replay line ("specify -run=<that name> -rapid.seed=N"), which
// names a test that does not exist and a flag that only go test accepts,
// into the entry point's own (settings.replayRapid).
type rapidTB struct {
	testing.TB
	name   string
	replay func(seed uint64) string
}

func (r rapidTB) Name() string { return r.name }

var rapidReplayLine = regexp.MustCompile(`To (?:try to )?reproduce, specify -run="[^"]*" (?:-rapid\.failfile="[^"]*" \(or )?-rapid\.seed=(\d+)\)?`)

func (r rapidTB) Errorf(format string, args ...any) {
	r.TB.Helper()
	msg := rapidReplayLine.ReplaceAllStringFunc(fmt.Sprintf(format, args...), func(line string) string {
		seed, err := strconv.ParseUint(rapidReplayLine.FindStringSubmatch(line)[1], 10, 64)
		if err != nil {
			return line
		}
		return r.replay(seed)
	})
	r.TB.Error(msg)
}

func runStateMachine(t testing.TB, f Factory, s *settings) {
	set := map[string]string{
		"rapid.nofailfile": "true",
		"rapid.failfile":   "",
	}
	if s.rapidChecks > 0 {
		set["rapid.checks"] = strconv.Itoa(s.rapidChecks)
	}
	if s.rapidSteps > 0 {
		set["rapid.steps"] = strconv.Itoa(s.rapidSteps)
	}
	if s.rapidSeed != 0 {
		set["rapid.seed"] = strconv.FormatUint(s.rapidSeed, 10)
	}
	if s.shrinkTime > 0 {
		set["rapid.shrinktime"] = s.shrinkTime.String()
	}
	counts := &reach{}
	defer func() {
		t.Log(counts.String())
		if reachObserved != nil {
			reachObserved(*counts)
		}
	}()
	withRapidFlags(t, set, func() {
		name := fmt.Sprintf("%s-fresh-%d-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano(), freshRun.Add(1))
		replay := func(seed uint64) string { return s.replayRapid(t.Name(), seed) }
		rapid.Check(rapidTB{TB: t, name: name, replay: replay}, func(rt *rapid.T) {
			sc := newScope(t)
			defer sc.end()
			m := &machine{
				t:     rt,
				st:    f.New(sc),
				feats: f.Features,
				cands: []model.Store{{}},
				now:   t0,
				reach: counts,
			}
			rt.Repeat(m.actions())
		})
	})
}

// maxCandidates bounds the states the model tracks after ambiguous errors.
// Every step's full-state comparison prunes them, so reaching it means the
// backend failed nearly every call.
const maxCandidates = 256

// machine drives one generated sequence. cands holds every model state the
// backend may be in: one, unless an ambiguous error (Features.AmbiguousErrors)
// left "applied" and "not applied" both possible.
type machine struct {
	t     *rapid.T
	st    impl.Store
	feats Features
	cands []model.Store
	now   time.Time

	lastMark model.Op // the last MarkProcessed, for redeliveries
	reach    *reach
}

// reach counts how often the calls that only some states accept were
// accepted over one run of the state machine: a suite whose Fails are all
// refused never tests a dead letter.
type reach struct {
	fail, failOK, dead, requeue, requeueOK int
}

// reachPrefix starts the reach line in the state machine's log.
const reachPrefix = "reach:"

func (r *reach) String() string {
	pct := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return 100 * float64(a) / float64(b)
	}
	return fmt.Sprintf("%s Fail accepted %d/%d (%.0f%%, %d dead letters), Requeue accepted %d/%d (%.0f%%)", reachPrefix,
		r.failOK, r.fail, pct(r.failOK, r.fail), r.dead, r.requeueOK, r.requeue, pct(r.requeueOK, r.requeue))
}

// reachObserved, when set (by tests), receives each run's counts.
var reachObserved func(reach)

var (
	genStream    = rapid.SampledFrom([]string{"s1", "s2"})
	genCursorSub = rapid.SampledFrom([]string{"", "bot1"})
	// Ids compare bytewise: "10" before "9", "B" before "a".
	genPosID  = rapid.SampledFrom([]string{"", "a", "b", "B", "9", "10"})
	genSub    = rapid.SampledFrom([]string{"bot1", "bot2"})
	genAnySub = rapid.SampledFrom([]string{"", "bot1", "bot2"})
	// "e10" sorts before "e2", "E3" before "e1": a backend that orders
	// event ids by anything but bytes shows it in QueueOrder ties.
	genEvent = rapid.SampledFrom([]string{"e1", "e2", "e10", "E3"})
	// Positions mostly collide in a small range, and otherwise sit on
	// decimal digit boundaries and the int32, float64 and int64 limits,
	// where a text or narrow encoding of a position orders or rounds wrong.
	genMajor = rapid.OneOf(rapid.Int64Range(0, 3),
		rapid.SampledFrom([]int64{9, 10, 11, 99, 100, 1<<31 - 1, 1 << 31, 1<<53 + 1, math.MaxInt64}))
	genMinor = rapid.OneOf(rapid.Int64Range(0, 2), rapid.SampledFrom([]int64{9, 10, 1<<31 - 1, 1 << 31}))
	// Sub-second parts: none, the last nanosecond, a microsecond edge and
	// any, so that a backend keeping only seconds, milliseconds or
	// microseconds (a timestamptz) shows it.
	genNanos   = rapid.OneOf(rapid.Just(0), rapid.SampledFrom([]int{1, 999, 1000, 999_999, 999_999_999}), rapid.IntRange(0, 999_999_999))
	genOwner   = rapid.SampledFrom([]string{"n1", "n2"})
	genApp     = rapid.SampledFrom([]string{"app1", "app2"})
	genItemID  = rapid.SampledFrom([]string{"f1", "f2", "f3"})
	genVersion = rapid.SampledFrom([]string{"v1", "v2"})
	genBytes   = rapid.SliceOfN(rapid.Byte(), 0, 3)
	// A message's payload is empty one time in four: an empty payload is
	// stored as nothing (NULL), so a Requeue that loses the payload shows
	// only on the others, and rapid's small draws made most payloads empty
	// (the payload-dropping bug then needed up to 150 sequences to meet).
	genPayload = rapid.OneOf(rapid.Just([]byte(nil)), rapid.SliceOfN(rapid.Byte(), 1, 3), rapid.SliceOfN(rapid.Byte(), 1, 3), rapid.SliceOfN(rapid.Byte(), 1, 3))
)

// secs draws a duration from lo to hi seconds, with a sub-second part (hi
// itself stays whole, so the bounds hold).
func (m *machine) secs(label string, lo, hi int) time.Duration {
	d := time.Duration(rapid.IntRange(lo, hi).Draw(m.t, label)) * time.Second
	if d < time.Duration(hi)*time.Second {
		d += time.Duration(genNanos.Draw(m.t, label+"Nanos"))
	}
	return d
}

func (m *machine) msgKey() impl.MessageKey {
	return impl.MessageKey{Subscriber: genSub.Draw(m.t, "sub"), EventID: genEvent.Draw(m.t, "event")}
}

// message draws one message for Enqueue and EnqueueLeased, created up to
// three seconds before now.
func (m *machine) message() impl.Message {
	k := m.msgKey()
	return impl.Message{
		Subscriber: k.Subscriber,
		EventID:    k.EventID,
		Stream:     genStream.Draw(m.t, "stream"),
		Pos:        impl.Position{Major: genMajor.Draw(m.t, "major"), Minor: genMinor.Draw(m.t, "minor"), ID: genPosID.Draw(m.t, "posID")},
		Payload:    genPayload.Draw(m.t, "payload"),
		CreatedAt:  m.now.Add(-m.secs("age", 0, 3)),
	}
}

func (m *machine) cursor() impl.Cursor {
	return impl.Cursor{
		Key: impl.CursorKey{Stream: genStream.Draw(m.t, "stream"), Subscriber: genCursorSub.Draw(m.t, "cursorSub")},
		Pos: impl.Position{
			Major: genMajor.Draw(m.t, "major"),
			Minor: genMinor.Draw(m.t, "minor"),
			ID:    genPosID.Draw(m.t, "posID"),
		},
		Token:     genBytes.Draw(m.t, "token"),
		UpdatedAt: m.now,
	}
}

func (m *machine) actions() map[string]func(*rapid.T) {
	a := map[string]func(*rapid.T){
		"": func(*rapid.T) { m.checkState() },
		"Tick": func(*rapid.T) {
			m.now = m.now.Add(m.secs("tick", 0, 3))
		},
		"GetCursor": func(*rapid.T) {
			m.do(model.Op{Kind: model.OpGetCursor, CursorKey: impl.CursorKey{Stream: genStream.Draw(m.t, "stream"), Subscriber: genCursorSub.Draw(m.t, "cursorSub")}})
		},
		"AdvanceCursors": func(*rapid.T) {
			n := rapid.IntRange(1, 3).Draw(m.t, "n")
			cs := make([]impl.Cursor, n)
			for i := range cs {
				cs[i] = m.cursor()
			}
			m.do(model.Op{Kind: model.OpAdvanceCursors, Cursors: cs})
		},
		"Enqueue": func(*rapid.T) {
			n := rapid.IntRange(1, 3).Draw(m.t, "n")
			ms := make([]impl.Message, n)
			for i := range ms {
				ms[i] = m.message()
			}
			m.do(model.Op{Kind: model.OpEnqueue, Messages: ms})
		},
		"Claim": func(*rapid.T) {
			m.do(model.Op{Kind: model.OpClaim, Claim: impl.ClaimRequest{
				Subscriber: genAnySub.Draw(m.t, "sub"),
				Owner:      genOwner.Draw(m.t, "owner"),
				Now:        m.now,
				Lease:      m.secs("lease", 0, 4),
				Limit:      rapid.IntRange(0, 3).Draw(m.t, "limit"),
			}})
		},
		"Ack": func(*rapid.T) {
			n := rapid.IntRange(0, 3).Draw(m.t, "n")
			ks := make([]impl.MessageKey, n)
			for i := range ks {
				ks[i] = m.msgKey()
			}
			m.do(model.Op{Kind: model.OpAck, Keys: ks})
		},
		// Fail and Requeue are accepted only for a leased message and its
		// owner, or a dead one: drawn blind over the key space, about 1 in
		// 20 were, and the dead-letter and requeue paths were barely run.
		// So most draws take a key from the model's current state (and Fail
		// mostly names the lease's owner); a few stay blind to keep the
		// refusals tested.
		"Fail": func(*rapid.T) {
			if rapid.IntRange(0, 9).Draw(m.t, "blind") > 0 {
				m.failLeased()
				return
			}
			m.do(model.Op{
				Kind:   model.OpFail,
				Key:    m.msgKey(),
				Owner:  genOwner.Draw(m.t, "owner"),
				Next:   m.now.Add(m.secs("backoff", 0, 3)),
				Max:    rapid.IntRange(1, 3).Draw(m.t, "maxAttempts"),
				Reason: rapid.SampledFrom([]string{"timeout", "http 503"}).Draw(m.t, "reason"),
			})
		},
		// A second, steered-only entry doubles the odds that a leased or
		// dead message meets its Fail or Requeue before the sequence ends.
		"FailLeased": func(*rapid.T) { m.failLeased() },
		"Requeue": func(*rapid.T) {
			dead := m.messages(func(x impl.Message) bool { return x.Dead })
			if len(dead) == 0 {
				// Now and then a blind key: the refusal is tested too.
				if rapid.IntRange(0, 59).Draw(m.t, "blind") > 0 {
					m.t.Skip("no dead message")
				}
				m.do(model.Op{Kind: model.OpRequeue, Key: m.msgKey(), Now: m.now})
				return
			}
			m.requeue(dead)
		},
		"RequeueDead": func(*rapid.T) {
			dead := m.messages(func(x impl.Message) bool { return x.Dead })
			if len(dead) == 0 {
				m.t.Skip("no dead message")
			}
			m.requeue(dead)
		},
		"ListMessages": func(*rapid.T) {
			m.do(model.Op{Kind: model.OpListMessages, Sub: genAnySub.Draw(m.t, "sub")})
		},
		"DeleteExpired": func(*rapid.T) {
			m.do(model.Op{Kind: model.OpDeleteExpired, Cutoff: m.now.Add(-m.secs("ttl", 0, 4)), Now: m.now})
		},
		"TrimPerSubscriber": func(*rapid.T) {
			m.do(model.Op{Kind: model.OpTrimPerSubscriber, Max: rapid.IntRange(0, 3).Draw(m.t, "max"), Now: m.now})
		},
		"GetDelivered": func(*rapid.T) {
			m.do(model.Op{Kind: model.OpGetDelivered, App: genApp.Draw(m.t, "app"), Source: "repo"})
		},
		"RecordDelivered": func(*rapid.T) {
			n := rapid.IntRange(0, 3).Draw(m.t, "n")
			items := make([]impl.DeliveredItem, n)
			upserted := map[string]bool{}
			for i := range items {
				items[i] = impl.DeliveredItem{ID: genItemID.Draw(m.t, "id"), Version: genVersion.Draw(m.t, "version")}
				upserted[items[i].ID] = true
			}
			// An ID both upserted and deleted in one call is unspecified.
			var deleted []string
			for _, id := range rapid.SliceOfN(genItemID, 0, 2).Draw(m.t, "deleted") {
				if !upserted[id] {
					deleted = append(deleted, id)
				}
			}
			m.do(model.Op{Kind: model.OpRecordDelivered, App: genApp.Draw(m.t, "app"), Source: "repo", Items: items, Deleted: deleted})
		},
		"MarkProcessed": func(*rapid.T) {
			m.lastMark = model.Op{
				Kind:    model.OpMarkProcessed,
				Sub:     genSub.Draw(m.t, "sub"),
				EventID: rapid.SampledFrom([]string{"e1", "e2"}).Draw(m.t, "event"),
				Now:     m.now,
				Window:  m.secs("window", 1, 3),
			}
			m.do(m.lastMark)
		},
		// A webhook retry: the receiver sees the last event again, a little
		// later. Dedup bugs only show over several sightings of one key.
		"MarkProcessedRedelivery": func(*rapid.T) {
			if m.lastMark.Kind == "" {
				m.t.Skip("nothing delivered yet")
			}
			m.now = m.now.Add(m.secs("retryAfter", 0, 2))
			m.lastMark.Now = m.now
			m.do(m.lastMark)
		},
	}
	if has(m.st, CapLeasedEnqueue) && m.feats.certifies(CapLeasedEnqueue) {
		a["EnqueueLeased"] = func(*rapid.T) {
			n := rapid.IntRange(1, 3).Draw(m.t, "n")
			ms := make([]impl.Message, n)
			for i := range ms {
				ms[i] = m.message()
				// Mostly leased to a node, as the engine hands off; an
				// unleased entry in the same batch is a plain enqueue.
				if owner := rapid.SampledFrom([]string{"", "n1", "n2"}).Draw(m.t, "leaseOwner"); owner != "" {
					ms[i].LeaseOwner, ms[i].LeaseUntil = owner, m.now.Add(m.secs("lease", 0, 4))
				}
			}
			m.do(model.Op{Kind: model.OpEnqueueLeased, Messages: ms})
		}
	}
	if has(m.st, CapHandOff) && m.feats.certifies(CapHandOff) {
		// As the engine hands off: the previous batch's acks, this batch
		// leased to its node, the stream's cursor, in any mix (each part
		// may be empty).
		a["WriteHandOff"] = func(*rapid.T) {
			op := model.Op{Kind: model.OpWriteHandOff}
			for range rapid.IntRange(0, 3).Draw(m.t, "acks") {
				op.Keys = append(op.Keys, m.msgKey())
			}
			for range rapid.IntRange(0, 3).Draw(m.t, "enqueue") {
				msg := m.message()
				msg.LeaseOwner, msg.LeaseUntil = rapid.SampledFrom([]string{"n1", "n2"}).Draw(m.t, "leaseOwner"), m.now.Add(m.secs("lease", 0, 4))
				op.Messages = append(op.Messages, msg)
			}
			for range rapid.IntRange(0, 2).Draw(m.t, "cursors") {
				op.Cursors = append(op.Cursors, m.cursor())
			}
			m.do(op)
		}
	}
	if has(m.st, CapBlindCursor) && m.feats.certifies(CapBlindCursor) {
		a["PutCursorBlind"] = func(*rapid.T) {
			m.do(model.Op{Kind: model.OpPutCursorBlind, Cursor: m.cursor()})
		}
	}
	return a
}

// failLeased fails a leased message, mostly as its owner, with a limit that
// often makes it a dead letter (a limit counts from the attempts it has).
func (m *machine) failLeased() {
	msg := m.pickMessage("leased", func(x impl.Message) bool { return x.LeaseOwner != "" })
	owner := msg.LeaseOwner
	if rapid.IntRange(0, 9).Draw(m.t, "wrongOwner") == 0 {
		owner = map[string]string{"n1": "n2", "n2": "n1"}[owner]
	}
	m.do(model.Op{
		Kind:   model.OpFail,
		Key:    msg.Key(),
		Owner:  owner,
		Next:   m.now.Add(m.secs("backoff", 0, 3)),
		Max:    msg.Attempts + rapid.IntRange(1, 2).Draw(m.t, "attemptsLeft"),
		Reason: rapid.SampledFrom([]string{"timeout", "http 503"}).Draw(m.t, "reason"),
	})
}

// requeue requeues one of the dead messages and reads it back.
func (m *machine) requeue(dead []impl.Message) {
	msg := dead[rapid.IntRange(0, len(dead)-1).Draw(m.t, "dead")]
	m.do(model.Op{Kind: model.OpRequeue, Key: msg.Key(), Now: m.now})
	m.checkRequeued(msg)
}

// pickMessage draws one of the model's messages that satisfy ok, or skips
// the action when there is none. The first candidate state stands for all:
// steering only needs a likely key, the comparison stays exact.
func (m *machine) pickMessage(what string, ok func(impl.Message) bool) impl.Message {
	xs := m.messages(ok)
	if len(xs) == 0 {
		m.t.Skip("no " + what + " message")
	}
	return xs[rapid.IntRange(0, len(xs)-1).Draw(m.t, what)]
}

// messages lists the model's messages that satisfy ok.
func (m *machine) messages(ok func(impl.Message) bool) []impl.Message {
	var xs []impl.Message
	for _, x := range m.cands[0].ListMessages("") {
		if ok(x) {
			xs = append(xs, x)
		}
	}
	return xs
}

// checkRequeued reads a requeued message back and compares every field
// with the model, naming the first that differs: the full-state check
// would catch it too, but not say which field a Requeue lost.
func (m *machine) checkRequeued(before impl.Message) {
	got, err := m.st.ListMessages(context.Background(), before.Subscriber)
	if err != nil {
		return // an ambiguous backend's error; the state check follows
	}
	want := m.cands[0].ListMessages(before.Subscriber)
	if len(m.cands) > 1 {
		return
	}
	find := func(ms []impl.Message) (impl.Message, bool) {
		for _, x := range ms {
			if x.Key() == before.Key() {
				return x, true
			}
		}
		return impl.Message{}, false
	}
	w, wok := find(want)
	g, gok := find(got)
	if wok != gok {
		m.t.Fatalf("Requeue(%q,%q): the backend %s the message, the model %s it", before.Subscriber, before.EventID,
			map[bool]string{true: "kept", false: "lost"}[gok], map[bool]string{true: "kept", false: "lost"}[wok])
	}
	if !wok {
		return
	}
	if field := firstDiff(model.NormMessage(g), w); field != "" {
		m.t.Fatalf("Requeue(%q,%q): backend and model disagree on the requeued message's %s (the contract: %q)\n  backend: %s\n  model:   %s", before.Subscriber, before.EventID, field,
			ruleRequeueKeepsLastError, model.FormatMessage(g), model.FormatMessage(w))
	}
}

// firstDiff names the first field in which two messages differ (all of
// impl.Message's fields, including any added later).
func firstDiff(a, b impl.Message) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		fa, fb := va.Field(i).Interface(), vb.Field(i).Interface()
		switch x := fa.(type) {
		case []byte:
			if !bytes.Equal(x, fb.([]byte)) {
				return va.Type().Field(i).Name
			}
		case time.Time:
			if !x.Equal(fb.(time.Time)) {
				return va.Type().Field(i).Name
			}
		default:
			if !reflect.DeepEqual(fa, fb) {
				return va.Type().Field(i).Name
			}
		}
	}
	return ""
}

// checkState compares the whole observable queue and cursor state.
func (m *machine) checkState() {
	m.observe(model.Op{Kind: model.OpListCursors}, false)
	m.observe(model.Op{Kind: model.OpListMessages}, false)
}

func (m *machine) do(op model.Op) { m.observe(op, true) }

// observe runs op on the backend and keeps the candidate model states that
// produce the same result; none left is a conformance failure.
func (m *machine) observe(op model.Op, logIt bool) {
	m.t.Helper()
	got, err := op.Exec(context.Background(), m.st)
	if err != nil {
		if !m.feats.AmbiguousErrors {
			m.t.Fatal(undeclaredError(op.String(), err))
		}
		m.t.Logf("%s -> error, outcome unknown: %v", op, err)
		if op.ReadOnly() {
			return
		}
		var next []model.Store
		for _, c := range m.cands {
			applied, _ := op.Apply(c)
			next = append(next, c, applied)
		}
		m.setCandidates(next)
		return
	}
	if logIt {
		m.t.Logf("%s -> %s", op, got.Format(op.Kind))
		m.count(op, got)
	}
	var next []model.Store
	var want model.Result
	for i, c := range m.cands {
		s, r := op.Apply(c)
		if r.Equal(got) {
			next = append(next, s)
		} else if i == 0 {
			want = r
		}
	}
	if len(next) == 0 {
		what := "result"
		if !logIt {
			what = "state after the last step"
		}
		m.t.Fatalf("%s: backend and model disagree on the %s\n%s\n  backend: %s\n  model:   %s%s%s",
			op.Kind, what, op, got.Format(op.Kind), want.Format(op.Kind), resultDiff(op, want, got), m.candidateNote())
	}
	m.setCandidates(next)
}

func (m *machine) count(op model.Op, got model.Result) {
	switch op.Kind {
	case model.OpFail:
		m.reach.fail++
		if got.OK {
			m.reach.failOK++
			if got.Message.Dead {
				m.reach.dead++
			}
		}
	case model.OpRequeue:
		m.reach.requeue++
		if got.OK {
			m.reach.requeueOK++
		}
	}
}

func (m *machine) candidateNote() string {
	if len(m.cands) == 1 {
		return ""
	}
	return fmt.Sprintf("\n  (after ambiguous errors the model allowed %d states; none matches; the first is shown)", len(m.cands))
}

func (m *machine) setCandidates(states []model.Store) {
	var uniq []model.Store
	for _, s := range states {
		dup := false
		for _, u := range uniq {
			if u.Equal(s) {
				dup = true
				break
			}
		}
		if !dup {
			uniq = append(uniq, s)
		}
	}
	if len(uniq) > maxCandidates {
		m.t.Fatalf("more than %d possible model states after ambiguous errors: the backend fails too many calls for the model to follow; lower the fault rate", maxCandidates)
	}
	m.cands = uniq
}
