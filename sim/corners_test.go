package sim

import (
	"context"
	"testing"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

// payloadDedupStore is a planted class-7 bug of our own: a store that
// deduplicates the queue by content (subscriber and payload bytes) instead
// of by (subscriber, event id), as a store keyed on a body hash would. Two
// different events with identical payloads waiting for one bot collapse
// into one: the second is silently lost. Every other method is memstore's.
type payloadDedupStore struct{ *memstore.Store }

func (p payloadDedupStore) keep(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	keep := make([]bool, len(msgs))
	have := map[string]bool{}
	queued, err := p.Store.ListMessages(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, m := range queued {
		have[m.Subscriber+"\x00"+string(m.Payload)] = true
	}
	for i, m := range msgs {
		k := m.Subscriber + "\x00" + string(m.Payload)
		keep[i] = !have[k]
		have[k] = true
	}
	return keep, nil
}

func (p payloadDedupStore) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	keep, err := p.keep(ctx, msgs)
	if err != nil {
		return 0, err
	}
	var in []impl.Message
	for i := range msgs {
		if keep[i] {
			in = append(in, msgs[i])
		}
	}
	return p.Store.Enqueue(ctx, in)
}

func (p payloadDedupStore) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	keep, err := p.keep(ctx, msgs)
	if err != nil {
		return nil, err
	}
	var in []impl.Message
	for i := range msgs {
		if keep[i] {
			in = append(in, msgs[i])
		}
	}
	ins, err := p.Store.EnqueueLeased(ctx, in)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(msgs))
	j := 0
	for i := range msgs {
		if keep[i] {
			out[i] = ins[j]
			j++
		}
	}
	return out, nil
}

// The planted payload-collision store passes a blind sweep of worlds
// without corner inputs (every payload names its event, so none collide:
// what the generator made before class 7) and is caught by the same seeds
// with the corners each seed draws, by no-silent-loss.
func TestCornersCatchPayloadDedupStore(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2x40-seed sweep")
	}
	buggy := func() (impl.Store, error) { return payloadDedupStore{memstore.New()}, nil }
	const seeds = 40
	var before, after, reached int
	for seed := uint64(1); seed <= seeds; seed++ {
		plain := DrawWorkloadWith(seed, 0)
		before += len(mustRun(t, Config{Seed: seed, Workload: &plain, Store: buggy}).Violations)
		r := mustRun(t, Config{Seed: seed, Store: buggy})
		reached += r.Coverage["input/payload-identical"]
		for _, v := range r.Violations {
			if v.Invariant == "no-silent-loss" {
				after++
			}
		}
	}
	if before != 0 {
		t.Fatalf("without corner inputs the payload-dedup store already fails (%d violations): the test shows nothing", before)
	}
	if reached == 0 {
		t.Fatal("no identical payload reached a handler in 40 seeds")
	}
	if after == 0 {
		t.Fatalf("the payload-dedup store survived %d seeds with corner inputs", seeds)
	}
	t.Logf("payload-dedup store: 0 violations in %d seeds without corners, %d no-silent-loss with them", seeds, after)
}

// The reference stack stays clean on every corner class at once, and a
// world without corners is the world the seed drew before they existed.
func TestCornersAllClassesClean(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		w := DrawWorkloadWith(seed, AllCorners)
		r := mustRun(t, Config{Seed: seed, Workload: &w})
		for _, v := range r.Violations {
			t.Errorf("seed %d, all corners: %v", seed, v)
		}
	}
	for seed := uint64(1); seed <= 50; seed++ {
		if got := DrawWorkload(seed); got.Corners != CornersOf(seed) {
			t.Fatalf("seed %d: drew %v, CornersOf says %v", seed, got.Corners, CornersOf(seed))
		}
	}
}

func TestCornerNames(t *testing.T) {
	for _, c := range append(CornerClasses(), AllCorners, 0) {
		back, err := ParseCorners(c.String())
		if err != nil || back != c {
			t.Fatalf("%v: parsed back as %v, %v", c, back, err)
		}
	}
	if _, err := ParseCorners("ties"); err == nil {
		t.Fatal("an unknown class parsed")
	}
}
