package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

// BenchmarkReplay measures hand-off throughput of a replay: batches of
// 1000 log events on one stream, with bots owed every event.
func BenchmarkReplay(b *testing.B) {
	for _, bots := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("bots=%d", bots), func(b *testing.B) {
			cfg := DefaultConfig()
			clk := &fakeClock{t: t0}
			cfg.Clock = clk
			cfg.Rand = rand.New(rand.NewPCG(1, 1))
			eng, err := New(cfg, memstore.New())
			if err != nil {
				b.Fatal(err)
			}
			reg := Registry{}
			for i := range bots {
				id := fmt.Sprintf("bot%d", i)
				reg.Bots = append(reg.Bots, Bot{ID: id, HasKey: true})
				reg.Memberships = append(reg.Memberships, member("s", id, impl.Position{}))
			}
			if err := eng.Step(Start{Registry: reg}); err != nil {
				b.Fatal(err)
			}
			eng.Ready()
			const per = 1000
			payload := []byte("0123456789abcdef0123456789abcdef")
			evs := make([]Event, per)
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				clk.t = clk.t.Add(time.Millisecond)
				for i := range evs {
					seq := int64(n*per + i)
					evs[i] = Event{ID: "e" + fmt.Sprint(seq), Stream: "s", Pos: pos(seq/100+1, seq%100), Payload: payload}
				}
				if err := eng.Step(UpstreamBatch{Stream: "s", Events: evs}); err != nil {
					b.Fatal(err)
				}
				eng.Ready()
			}
			b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
