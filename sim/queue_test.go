package sim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// The queue pops events in (at, seq) order, pushes and pops interleaved,
// with many events at the same instant.
func TestEventQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q eventQueue
	type item struct {
		at  time.Time
		seq uint64
	}
	var pending []item
	var popped []item
	for i := 0; i < 5000; i++ {
		if r.IntN(3) > 0 || q.len() == 0 {
			at := Epoch.Add(time.Duration(r.IntN(50)) * time.Millisecond)
			q.push(at, nil)
			pending = append(pending, item{at, q.seq})
			continue
		}
		sort.Slice(pending, func(i, j int) bool {
			if !pending[i].at.Equal(pending[j].at) {
				return pending[i].at.Before(pending[j].at)
			}
			return pending[i].seq < pending[j].seq
		})
		e := q.pop()
		if want := pending[0]; !e.at.Equal(want.at) || e.seq != want.seq {
			t.Fatalf("pop %d: got (%v, %d), want (%v, %d)", len(popped), e.at, e.seq, want.at, want.seq)
		}
		popped = append(popped, pending[0])
		pending = pending[1:]
	}
}

// drawnPayload is the fmt format it replaced, byte for byte, for stream
// names and ids that need quoting and escaping too.
func TestDrawnPayloadIsFmts(t *testing.T) {
	for _, name := range []string{"s", "orders", `q"uote`, "ünï", "tab\t", "\x00\xff"} {
		for _, id := range []string{"", "ev-0a1b2c3d4e5f", `a\\b`, "😀", "new\nline"} {
			for _, seq := range []int{0, 1, 42, 1 << 40, -7} {
				for _, data := range [][8]byte{{}, {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 0xff}} {
					want := fmt.Appendf(nil, `{"stream":%q,"seq":%d,"id":%q,"data":"%x"}`, name, seq, id, data)
					if got := drawnPayload(name, seq, id, data); !bytes.Equal(got, want) {
						t.Fatalf("drawnPayload = %s, fmt %s", got, want)
					}
				}
			}
		}
	}
}
