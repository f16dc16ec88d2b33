package conformance

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
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
// Reproduce with -rapid.seed (printed on failure) or the fail file rapid
// writes under testdata/rapid when run through Run.

func stateMachineChecks() []check {
	return []check{{
		group: GroupStateMachine,
		name:  "Random",
		skip:  func(Factory) string { return "" },
		run:   runStateMachine,
	}}
}

// rapidMu serialises the suite's rapid runs: rapid reads its settings from
// process-wide flags, which Check and the options change for the duration
// of one run.
var rapidMu sync.Mutex

func withRapidFlags(t testing.TB, set map[string]string, fn func()) {
	t.Helper()
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

func runStateMachine(t testing.TB, f Factory, s *settings) {
	set := map[string]string{}
	if s.noFailFile {
		set["rapid.nofailfile"] = "true"
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
	withRapidFlags(t, set, func() {
		rapid.Check(t, func(rt *rapid.T) {
			sc := newScope(t)
			defer sc.end()
			m := &machine{
				t:     rt,
				st:    f.New(sc),
				feats: f.Features,
				cands: []model.Store{{}},
				now:   t0,
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
}

var (
	genStream    = rapid.SampledFrom([]string{"s1", "s2"})
	genCursorSub = rapid.SampledFrom([]string{"", "bot1"})
	genPosID     = rapid.SampledFrom([]string{"", "a", "b"})
	genSub       = rapid.SampledFrom([]string{"bot1", "bot2"})
	genAnySub    = rapid.SampledFrom([]string{"", "bot1", "bot2"})
	genEvent     = rapid.SampledFrom([]string{"e1", "e2", "e3", "e4"})
	genOwner     = rapid.SampledFrom([]string{"n1", "n2"})
	genApp       = rapid.SampledFrom([]string{"app1", "app2"})
	genItemID    = rapid.SampledFrom([]string{"f1", "f2", "f3"})
	genVersion   = rapid.SampledFrom([]string{"v1", "v2"})
	genBytes     = rapid.SliceOfN(rapid.Byte(), 0, 3)
)

func (m *machine) secs(label string, lo, hi int) time.Duration {
	return time.Duration(rapid.IntRange(lo, hi).Draw(m.t, label)) * time.Second
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
		Pos:        impl.Position{Major: rapid.Int64Range(0, 3).Draw(m.t, "major")},
		Payload:    genBytes.Draw(m.t, "payload"),
		CreatedAt:  m.now.Add(-m.secs("age", 0, 3)),
	}
}

func (m *machine) cursor() impl.Cursor {
	return impl.Cursor{
		Key: impl.CursorKey{Stream: genStream.Draw(m.t, "stream"), Subscriber: genCursorSub.Draw(m.t, "cursorSub")},
		Pos: impl.Position{
			Major: rapid.Int64Range(0, 3).Draw(m.t, "major"),
			Minor: rapid.Int64Range(0, 2).Draw(m.t, "minor"),
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
		"Fail": func(*rapid.T) {
			m.do(model.Op{
				Kind:   model.OpFail,
				Key:    m.msgKey(),
				Owner:  genOwner.Draw(m.t, "owner"),
				Next:   m.now.Add(m.secs("backoff", 0, 3)),
				Max:    rapid.IntRange(1, 3).Draw(m.t, "maxAttempts"),
				Reason: rapid.SampledFrom([]string{"timeout", "http 503"}).Draw(m.t, "reason"),
			})
		},
		"Requeue": func(*rapid.T) {
			m.do(model.Op{Kind: model.OpRequeue, Key: m.msgKey(), Now: m.now})
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
	if _, ok := m.st.(impl.LeasingEnqueuer); ok {
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
	if m.feats.BlindCursor {
		a["PutCursorBlind"] = func(*rapid.T) {
			m.do(model.Op{Kind: model.OpPutCursorBlind, Cursor: m.cursor()})
		}
	}
	return a
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
			m.t.Fatalf("%s failed: %v\n(the backend does not declare Features.AmbiguousErrors, so every call must succeed)", op, err)
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
		m.t.Fatalf("%s: backend and model disagree on the %s\n%s\n  backend: %s\n  model:   %s%s",
			op.Kind, what, op, got.Format(op.Kind), want.Format(op.Kind), m.candidateNote())
	}
	m.setCandidates(next)
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
