package faults

import (
	"context"
	"errors"
	"math/rand/v2"
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

func TestStoreErrorFailsBeforeApplying(t *testing.T) {
	inner := &queueStore{msgs: map[impl.MessageKey]impl.Message{}}
	var told []string
	s := NewStore(inner, rand.New(rand.NewPCG(1, 2)), None().With(StoreError, Params{Rate: 1}))
	s.OnFault = func(k Kind, m string) { told = append(told, string(k)+":"+m) }
	_, err := s.Enqueue(context.Background(), msg("e1"))
	if !errors.Is(err, ErrInjected) || errors.Is(err, impl.ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrInjected and not ambiguous", err)
	}
	if len(inner.msgs) != 0 {
		t.Fatal("a call failed before applying still reached the store")
	}
	if !reflect.DeepEqual(told, []string{"store-error:Enqueue"}) || s.Injected()[StoreError] != 1 {
		t.Fatalf("fault not reported: told=%v counts=%v", told, s.Injected())
	}
	s.SetActive(false)
	if _, err := s.Enqueue(context.Background(), msg("e1")); err != nil || len(inner.msgs) != 1 {
		t.Fatalf("inactive wrapper still injected: err=%v", err)
	}
}

func TestStoreAmbiguousAppliesThenFails(t *testing.T) {
	inner := &queueStore{msgs: map[impl.MessageKey]impl.Message{}}
	s := NewStore(inner, rand.New(rand.NewPCG(1, 2)), None().With(StoreAmbiguous, Params{Rate: 1}))
	_, err := s.Enqueue(context.Background(), msg("e1"))
	if !errors.Is(err, impl.ErrAmbiguous) {
		t.Fatalf("err = %v, want impl.ErrAmbiguous", err)
	}
	if len(inner.msgs) != 1 {
		t.Fatal("an ambiguous write did not commit")
	}
	// Reads are never ambiguous.
	if _, err := s.ListMessages(context.Background(), ""); err != nil {
		t.Fatalf("read failed under an ambiguous-only plan: %v", err)
	}
}

func TestStoreScheduleIsSeeded(t *testing.T) {
	run := func() []bool {
		inner := &queueStore{msgs: map[impl.MessageKey]impl.Message{}}
		s := NewStore(inner, rand.New(rand.NewPCG(7, 9)), None().With(StoreError, Params{Rate: 0.3}))
		var out []bool
		for i := 0; i < 200; i++ {
			_, err := s.Enqueue(context.Background(), msg("e"))
			out = append(out, err != nil)
		}
		return out
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave a different failure schedule")
	}
	fails := 0
	for _, f := range a {
		if f {
			fails++
		}
	}
	if fails < 30 || fails > 90 {
		t.Fatalf("%d of 200 calls failed at rate 0.3", fails)
	}
}
