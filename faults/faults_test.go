package faults

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

func TestDrawIsDeterministicAndSwarms(t *testing.T) {
	if !reflect.DeepEqual(Draw(42), Draw(42)) {
		t.Fatal("Draw(42) differs between calls")
	}
	on := map[Kind]int{}
	distinct := map[string]bool{}
	const n = 200
	for seed := uint64(0); seed < n; seed++ {
		p := Draw(seed)
		if err := p.Validate(); err != nil {
			t.Fatalf("Draw(%d) is invalid: %v", seed, err)
		}
		distinct[p.String()] = true
		for _, k := range p.Kinds() {
			on[k]++
		}
	}
	for _, k := range All() {
		// Each kind is a fair coin: over 200 seeds it must be both on and off often.
		if on[k] < n/4 || on[k] > 3*n/4 {
			t.Errorf("kind %s enabled in %d of %d plans; want roughly half", k, on[k], n)
		}
	}
	if len(distinct) < n*9/10 {
		t.Errorf("only %d distinct plans in %d seeds", len(distinct), n)
	}
}

func TestPlanStringParsesBack(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		p := Draw(seed)
		q, err := ParsePlan(p.String())
		if err != nil {
			t.Fatalf("ParsePlan(%q): %v", p.String(), err)
		}
		if q.String() != p.String() {
			t.Fatalf("round trip changed the plan:\n%s\n%s", p, q)
		}
	}
	for _, bad := range []string{"crash", "nope=0.1", "crash=x", "crash=2", "webhook-slow=0.1/soon"} {
		if _, err := ParsePlan(bad); err == nil {
			t.Errorf("ParsePlan(%q) accepted a bad plan", bad)
		}
	}
}

// queueStore is the smallest store the wrapper tests need: a message set.
type queueStore struct {
	impl.Store
	msgs map[impl.MessageKey]impl.Message
}

func (q *queueStore) Enqueue(_ context.Context, ms []impl.Message) (int, error) {
	n := 0
	for _, m := range ms {
		if _, ok := q.msgs[m.Key()]; !ok {
			q.msgs[m.Key()] = m
			n++
		}
	}
	return n, nil
}

func (q *queueStore) ListMessages(context.Context, string) ([]impl.Message, error) {
	var out []impl.Message
	for _, m := range q.msgs {
		out = append(out, m)
	}
	return out, nil
}

func msg(id string) []impl.Message {
	return []impl.Message{{Subscriber: "b", EventID: id, CreatedAt: time.Unix(1, 0)}}
}

// script is an Injector that fails the calls it names.
type script struct {
	before, after map[string]bool
	asked         []string
}

func (s *script) Before(m string) (Kind, bool) {
	s.asked = append(s.asked, "before:"+m)
	return StoreError, s.before[m]
}

func (s *script) After(m string) (Kind, bool) {
	s.asked = append(s.asked, "after:"+m)
	return StoreAmbiguous, s.after[m]
}

func TestStoreErrorFailsBeforeApplying(t *testing.T) {
	inner := &queueStore{msgs: map[impl.MessageKey]impl.Message{}}
	inj := &script{before: map[string]bool{"Enqueue": true}}
	s := NewStore(inner, inj)
	_, err := s.Enqueue(context.Background(), msg("e1"))
	if !errors.Is(err, ErrInjected) || errors.Is(err, impl.ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrInjected and not ambiguous", err)
	}
	if len(inner.msgs) != 0 {
		t.Fatal("a call failed before applying still reached the store")
	}
	if !reflect.DeepEqual(inj.asked, []string{"before:Enqueue"}) {
		t.Fatalf("injector asked %v; a call failed before must not be asked after", inj.asked)
	}
	inj.before = nil
	if _, err := s.Enqueue(context.Background(), msg("e1")); err != nil || len(inner.msgs) != 1 {
		t.Fatalf("a call the injector spared failed: err=%v", err)
	}
}

func TestStoreAmbiguousAppliesThenFails(t *testing.T) {
	inner := &queueStore{msgs: map[impl.MessageKey]impl.Message{}}
	inj := &script{after: map[string]bool{"Enqueue": true, "ListMessages": true}}
	s := NewStore(inner, inj)
	_, err := s.Enqueue(context.Background(), msg("e1"))
	if !errors.Is(err, impl.ErrAmbiguous) {
		t.Fatalf("err = %v, want impl.ErrAmbiguous", err)
	}
	if len(inner.msgs) != 1 {
		t.Fatal("an ambiguous write did not commit")
	}
	// Reads are never ambiguous: the injector is not even asked.
	inj.asked = nil
	if _, err := s.ListMessages(context.Background(), ""); err != nil {
		t.Fatalf("read failed as ambiguous: %v", err)
	}
	if !reflect.DeepEqual(inj.asked, []string{"before:ListMessages"}) {
		t.Fatalf("injector asked %v for a read", inj.asked)
	}
}

// The kind list as of this test's writing. New kinds are appended to
// allKinds; this prefix must never change, or old seeds change plans.
var kindsAtWriting = []Kind{
	Crash, CrashAfterStoreWrite, CrashAfterSend, CrashAfterProcess,
	WebhookTimeout, Webhook5xx, WebhookRefused, WebhookSlow, WebhookDuplicate,
	UpstreamDuplicate, UpstreamReorder,
	ClockOffset, ClockDrift,
	StoreError, StoreAmbiguous,
	MembershipChurn, LateKey,
}

func TestKindsOnlyGrowAtTheEnd(t *testing.T) {
	all := All()
	if len(all) < len(kindsAtWriting) || !reflect.DeepEqual(all[:len(kindsAtWriting)], kindsAtWriting) {
		t.Fatalf("the kind list changed before its end:\n got %v\nwant it to start with %v\n"+
			"new kinds go at the end of allKinds, or every old seed draws a different plan", all, kindsAtWriting)
	}
	// Seeds' plans as drawn when this test was written: a change to the
	// draws themselves (not only to the list) fails here.
	golden := map[uint64]string{
		1:    "crash-after-process-before-cursor=0.009141705829750277,webhook-5xx=0.216208641255303,webhook-slow=0.08628116549693018/39.650776799s,webhook-duplicate=0.10855197950832945,upstream-reorder=0.16346911673904355,store-error=0.015863471029241627,membership-churn=0.17578060256361433",
		42:   "crash-after-store-write-before-send=0.019098615889091175,crash-after-send-before-ack=0.019156277409196214,crash-after-process-before-cursor=0.021451268445709673,webhook-refused=0.06945685713985894/16m58.092310541s,webhook-slow=0.11262884322440626/23.804066986s,upstream-duplicate=0.18807389572502362/34.443764708s,clock-offset=0/1m5.988450636s,clock-drift=0/1.205128873s,store-ambiguous=0.003948807832848756,membership-churn=0.41731131623467144,late-key=0.3741250116724369/29m7.513412298s",
		3000: "crash-after-store-write-before-send=0.010488027349390562,crash-after-send-before-ack=0.01745589994528183,webhook-timeout=0.028620113195242547,webhook-refused=0.04083543004375889/9m52.670894983s,webhook-slow=0.15393843290105252/32.501708838s,upstream-duplicate=0.14765330645887384/2m42.775356545s,upstream-reorder=0.06609253209118877,clock-drift=0/972.456194ms,late-key=0.23571852529676107/1h2m8.281250636s",
	}
	// Kinds added since draw their coins after these, so a seed's plan
	// restricted to the kinds at writing never changes.
	atWriting := func(p Plan) Plan {
		q := None()
		for _, k := range kindsAtWriting {
			if v, ok := p.Faults[k]; ok {
				q.Faults[k] = v
			}
		}
		return q
	}
	for seed, want := range golden {
		if got := atWriting(Draw(seed)).String(); got != want {
			t.Errorf("seed %d draws a different plan than when this test was written:\n got %s\nwant %s", seed, got, want)
		}
	}
}

// The drawn schedule is a function of seed, plan and world alone, spares
// the reference bot, and has a chance per enabled kind and target.
func TestPlanScheduleIsExplicit(t *testing.T) {
	w := World{Nodes: []string{"node-1", "node-2"}, Bots: []string{"a", "b", "c"}, Streams: []string{"s"}, Window: time.Hour}
	p := None().With(Webhook5xx, Params{Rate: 0.1}).With(Crash, Params{Rate: 0.01}).With(LateKey, Params{Rate: 1, Max: time.Hour})
	for seed := uint64(0); seed < 50; seed++ {
		a, b := p.Schedule(seed, w), p.Schedule(seed, w)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two draws differ", seed)
		}
		crashes, hit := 0, map[string]bool{}
		for _, c := range a.Chances {
			switch c.Kind {
			case Crash:
				crashes++
			case Webhook5xx:
				hit[c.Bot] = true
			default:
				t.Fatalf("seed %d: chance of a disabled kind %s", seed, c.Kind)
			}
		}
		late := map[string]bool{}
		for _, f := range a.Faults {
			if f.Kind != LateKey || f.At < time.Second || f.At > time.Hour {
				t.Fatalf("seed %d: unexpected exact fault %v", seed, f)
			}
			late[f.Bot] = true
		}
		if crashes != 2 || len(hit) == 0 || len(hit) == 3 || len(late) != 2 {
			t.Fatalf("seed %d: %d crash chances (want one per node), 5xx on %v (want some bots, never all), late keys %v (want all but the reference bot)",
				seed, crashes, hit, late)
		}
	}
}

// Appending a kind leaves every old kind's draw alone; inserting one
// earlier does not (so the rule above is the one that matters).
func TestAppendedKindKeepsOldPlans(t *testing.T) {
	saved := allKinds
	defer func() { allKinds = saved }()
	const extra = Kind("test-only-kind")
	restrict := func(p Plan) string {
		q := None()
		for _, k := range saved {
			if v, ok := p.Faults[k]; ok {
				q.Faults[k] = v
			}
		}
		return q.String()
	}
	before := map[uint64]string{}
	for seed := uint64(0); seed < 100; seed++ {
		before[seed] = Draw(seed).String()
	}
	allKinds = append(append([]Kind(nil), saved...), extra)
	for seed := uint64(0); seed < 100; seed++ {
		if got := restrict(Draw(seed)); got != before[seed] {
			t.Fatalf("seed %d: appending a kind changed the plan:\n%s\n%s", seed, before[seed], got)
		}
	}
	allKinds = append([]Kind{extra}, saved...)
	changed := 0
	for seed := uint64(0); seed < 100; seed++ {
		if restrict(Draw(seed)) != before[seed] {
			changed++
		}
	}
	if changed < 90 {
		t.Fatalf("inserting a kind first changed only %d of 100 plans; the test above would not notice a misplaced kind", changed)
	}
}

// A store fault that names no method is a database outage (or, ambiguous,
// a cut connection): it hits every call of its node, and a method it does
// name must still be a store call. When it fires, the simulator records it
// specialised to the call it hit, so a replay stays exact.
func TestStoreFaultWithoutMethodHitsEveryCall(t *testing.T) {
	outage := Fault{Kind: StoreError, At: time.Second, Until: 3 * time.Second, Node: "n1"}
	if err := outage.Validate(); err != nil {
		t.Fatalf("an outage (no method) is refused: %v", err)
	}
	for _, m := range StoreMethods {
		if !outage.Matches(Site{Kind: StoreError, At: 2 * time.Second, Ord: NoOrd, Node: "n1", Method: m}) {
			t.Errorf("the outage spares %s", m)
		}
	}
	if outage.Matches(Site{Kind: StoreError, At: 2 * time.Second, Ord: NoOrd, Node: "n2", Method: "Ack"}) {
		t.Error("the outage hits another node")
	}
	one := Fault{Kind: StoreError, Node: "n1", Method: "Ack"}
	if one.Matches(Site{Kind: StoreError, At: 0, Ord: 0, Node: "n1", Method: "Claim"}) {
		t.Error("a fault of Ack hits Claim")
	}
	if err := (Fault{Kind: StoreAmbiguous, Node: "n1", Method: "Commit"}).Validate(); err == nil {
		t.Error("a method that is no store call is accepted")
	}
}

// A plan that enables a kind whose outcome is never told keeps every
// other draw of its schedule: those kinds pick their bots from streams of
// their own.
func TestLostOutcomeKindsKeepTheRestOfTheSchedule(t *testing.T) {
	w := World{Nodes: []string{"node-1"}, Bots: []string{"a", "b", "c", "d"}, Streams: []string{"s"}, Window: time.Hour}
	p := None().With(Webhook5xx, Params{Rate: 0.1}).With(WebhookTimeout, Params{Rate: 0.1}).With(LateKey, Params{Rate: 0.5, Max: time.Hour})
	for seed := uint64(0); seed < 50; seed++ {
		old := p.Schedule(seed, w)
		got := p.With(WebhookHang, Params{Rate: 0.05}).With(ResultLost, Params{Rate: 0.05}).Schedule(seed, w)
		var rest Schedule
		rest.Faults = got.Faults
		hit := map[Kind]bool{}
		for _, c := range got.Chances {
			if c.Kind == WebhookHang || c.Kind == ResultLost {
				if c.Bot == "" || !IsWebhookFailure(c.Kind) {
					t.Fatalf("seed %d: %v hits no bot, or is not a webhook failure", seed, c)
				}
				hit[c.Kind] = true
				continue
			}
			rest.Chances = append(rest.Chances, c)
		}
		if !reflect.DeepEqual(rest, old) {
			t.Fatalf("seed %d: enabling the lost-outcome kinds changed the rest of the schedule:\n got %+v\nwant %+v", seed, rest, old)
		}
		if !hit[WebhookHang] || !hit[ResultLost] {
			t.Fatalf("seed %d: a lost-outcome kind hit no bot: %v", seed, hit)
		}
	}
}

// The index answers every site as the schedule's linear scan does: the
// first matching chance, of the site's kind, with its filters.
func TestChanceIndexIsScheduleChance(t *testing.T) {
	s := Schedule{Chances: []Chance{
		{Kind: Crash, Node: "node-2", Rate: 0.1},
		{Kind: WebhookTimeout, Bot: "b", Rate: 0.2},
		{Kind: Crash, Rate: 0.3},
		{Kind: WebhookTimeout, Rate: 0.4},
		{Kind: Crash, Node: "node-1", Rate: 0.5},
	}}
	ix := s.Index()
	for _, k := range []Kind{Crash, WebhookTimeout, Webhook5xx} {
		for _, node := range []string{"", "node-1", "node-2"} {
			for _, bot := range []string{"", "a", "b"} {
				site := Site{Kind: k, Node: node, Bot: bot}
				want, wok := s.Chance(site)
				got, gok := ix.Chance(&site)
				if got != want || gok != wok {
					t.Errorf("%+v: index %+v %v, schedule %+v %v", site, got, gok, want, wok)
				}
			}
		}
	}
}

// Unfired names the site entries no site matched, windowed ones included,
// and leaves out the entries the simulator applies by time.
func TestBookUnfired(t *testing.T) {
	b := NewBook([]Fault{
		{Kind: StoreError, Node: "node-1", Method: "Ack", Until: time.Minute},
		{Kind: Crash, Node: "node-2"},
		{Kind: MembershipChurn, Stream: "s", Bot: "b"},
	})
	if _, ok := b.Take(Site{Kind: StoreError, At: time.Second, Node: "node-1", Method: "Ack"}); !ok {
		t.Fatal("the windowed store error did not match its site")
	}
	got := b.Unfired()
	if len(got) != 1 || got[0].Kind != Crash {
		t.Fatalf("unfired %+v; want only the crash", got)
	}
	if _, ok := b.Take(Site{Kind: Crash, At: time.Second, Node: "node-2"}); !ok || len(b.Unfired()) != 0 {
		t.Fatalf("after the crash fired: %+v", b.Unfired())
	}
}
