package engine

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The table behaves as a map from id to request whose keys are put in
// increasing order, with gaps.
func TestReqTableMatchesAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab reqTable
		model := map[uint64]int{}
		next := uint64(rapid.IntRange(0, 5).Draw(t, "first"))
		for range rapid.IntRange(0, 300).Draw(t, "ops") {
			if rapid.Bool().Draw(t, "put") {
				next += uint64(rapid.IntRange(1, 3).Draw(t, "gap"))
				tab.put(next, request{attempt: int(next)})
				model[next] = int(next)
			} else {
				id := uint64(rapid.IntRange(0, int(next)+2).Draw(t, "id"))
				r, ok := tab.take(id)
				want, wantOK := model[id]
				if ok != wantOK || (ok && r.attempt != want) {
					t.Fatalf("take(%d) = %v %v, want %v %v", id, r.attempt, ok, want, wantOK)
				}
				delete(model, id)
			}
			var ids []uint64
			for id := range model {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			if got := tab.ids(); !slices.Equal(got, ids) {
				t.Fatalf("ids = %v, want %v", got, ids)
			}
			if tab.Len() != len(model) {
				t.Fatalf("Len = %d, want %d", tab.Len(), len(model))
			}
			for _, id := range ids {
				if r, ok := tab.get(id); !ok || r.attempt != model[id] {
					t.Fatalf("get(%d) = %v %v", id, r.attempt, ok)
				}
			}
		}
	})
}
