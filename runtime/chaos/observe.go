// What the harness reads from the engine beside the wire: its optional observation endpoint and its /metrics.

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// observe reads the engine's observation endpoint (PROTOCOL.md,
// "Observation"). It returns nil and why when there is no reading: the
// endpoint is optional, and what needs it is then not judged.
func (h *harness) observe(ctx context.Context) (*protocol.Observation, string) {
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodGet, "http://"+h.listen+protocol.PathObserve, nil)
	if err != nil {
		return nil, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "unreachable: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Sprintf("answered %d", resp.StatusCode)
	}
	var o protocol.Observation
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&o); err != nil {
		return nil, "the answer does not decode: " + err.Error()
	}
	return &o, ""
}

// observeUntil reads the endpoint, retrying for up to d (the engine may be
// starting); a 404 is final: the engine does not serve it.
func (h *harness) observeUntil(ctx context.Context, d time.Duration) *protocol.Observation {
	end := time.Now().Add(d)
	for {
		o, why := h.observe(ctx)
		h.rec.observed(o, why)
		if o != nil || strings.HasPrefix(why, "answered 404") || time.Now().After(end) || ctx.Err() != nil {
			return o
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// After the settle the cursors are read until they hold still: an engine
// may write a cursor just after the answers it covers, and one read taken
// the moment the settle saw the last obligation resolved raced that write
// (PROTOCOL.md, Observation: "When the cursor must be durable, as
// observed").
const (
	// cursorStill: the reading judged is the first whose cursors no read
	// changed for this long.
	cursorStill = 2 * time.Second
	// cursorReadFor bounds the re-reading (an engine whose cursors never
	// hold still is judged on its last reading).
	cursorReadFor   = 10 * time.Second
	cursorReadEvery = 200 * time.Millisecond
)

// observeSettled is the reading after the settle (cursor-progress,
// cursor-monotonic): observeUntil's, then read again until the cursors
// have not changed for cursorStill, for at most cursorReadFor.
func (h *harness) observeSettled(ctx context.Context) *protocol.Observation {
	o := h.observeUntil(ctx, 5*time.Second)
	if o == nil {
		return nil
	}
	end := time.Now().Add(cursorReadFor)
	still := time.Now()
	for time.Since(still) < cursorStill && time.Now().Before(end) && ctx.Err() == nil {
		sleepCtx(ctx, cursorReadEvery)
		next, why := h.observe(ctx)
		h.rec.observed(next, why)
		if next == nil {
			continue // a reading that failed changes nothing
		}
		if !slices.Equal(next.Cursors, o.Cursors) {
			still = time.Now()
		}
		o = next
	}
	return o
}

// scrape reads the engine's /metrics every second, and its observation
// endpoint too until the heal (the cursor it last showed before a kill is
// what resume-from-cursor judges the next process's first fetch against;
// the settle reads the endpoint itself).
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
		h.scrapeOnce(c, false)
		h.rec.mu.Lock()
		healed := !h.rec.healAt.IsZero()
		h.rec.mu.Unlock()
		if !healed {
			o, why := h.observe(ctx)
			h.rec.observed(o, why)
		}
	}
}

// scrapeOnce reads /metrics once; final marks the reading taken after the
// settle, before SIGTERM (reported-counters' lower bounds).
func (h *harness) scrapeOnce(c *http.Client, final bool) {
	resp, err := c.Get("http://" + h.listen + "/metrics")
	if err != nil {
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	var now [3]float64
	var ok [3]bool
	for i, name := range []string{"deliverysim_engine_acked_total", "deliverysim_engine_sent_total", "deliverysim_engine_store_errors_total"} {
		now[i], ok[i] = metric(string(body), name)
	}
	if !ok[0] || !ok[1] {
		return
	}
	h.rec.scraped(scrape{at: time.Now(), acked: now[0], sent: now[1]}, final)
	if final {
		return
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

func metric(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
