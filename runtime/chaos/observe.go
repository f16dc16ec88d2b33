// What the harness reads from the engine beside the wire: its store (the reference layout) and its /metrics.

package chaos

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// observeStore reads the engine's queue and cursors (directly, not
// through the proxy) a few times a second, for the cursor invariants and
// dead letters. Only a schema the reference store layout can open is read.
func (h *harness) observeStore(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.snapshotStore(ctx)
	}
}

func (h *harness) openStore(ctx context.Context) *pgstore.Store {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.store == nil {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := pgstore.Open(octx, h.directDSN, pgstore.Options{Schema: h.schema, MaxConns: 2, ApplicationName: "deliverysim-chaos-observer"})
		if err != nil {
			return nil
		}
		h.store = s
	}
	return h.store
}

func (h *harness) snapshotStore(ctx context.Context) (cs []impl.Cursor, ms []impl.Message, ok bool) {
	s := h.openStore(ctx)
	if s == nil {
		return nil, nil, false
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := s.ListCursors(c)
	if err != nil {
		return nil, nil, false
	}
	ms, err = s.ListMessages(c, "")
	if err != nil {
		return nil, nil, false
	}
	h.rec.storeSnapshot(cs, ms)
	return cs, ms, true
}

func (h *harness) finalStore() oracle.CheckFinal {
	cs, ms, ok := h.snapshotStore(context.Background())
	if !ok {
		return oracle.CheckFinal{}
	}
	return oracle.CheckFinal{Messages: ms, Cursors: cs}
}

// scrape reads the engine's /metrics every second.
func (h *harness) scrape(ctx context.Context) {
	c := &http.Client{Timeout: time.Second}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		resp, err := c.Get("http://" + h.listen + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		var now [3]float64
		var ok [3]bool
		for i, name := range []string{"deliverysim_engine_acked_total", "deliverysim_engine_sent_total", "deliverysim_engine_store_errors_total"} {
			now[i], ok[i] = metric(string(body), name)
		}
		if !ok[0] || !ok[1] {
			continue
		}
		h.mu.Lock()
		h.scrapes.Scrapes++
		for i := range now {
			if now[i] < h.lastSeen[i] {
				// A new process: its counters started again at zero.
				for j := range now {
					h.before[j] += h.lastSeen[j]
				}
				break
			}
		}
		h.lastSeen = now
		h.scrapes.Acked, h.scrapes.Sent, h.scrapes.StoreErrors = h.before[0]+now[0], h.before[1]+now[1], h.before[2]+now[2]
		h.mu.Unlock()
	}
}

func metric(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
