package runtime

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// ObservePath is where serve mounts ObserveHandler on its --listen address.
const ObservePath = protocol.PathObserve

// ObserveHandler serves the reference engine's answer to the protocol's
// observation endpoint (protocol.PathObserve) from its store: what is
// durable, not what the running process believes, since certification
// reads it across kills. The RetentionUncounted plant reports no drops.
func ObserveHandler(s impl.Store, timeout time.Duration, plant Plants) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		o, err := Observe(ctx, s)
		if err != nil {
			http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if plant.RetentionUncounted && o.RetentionDrops != nil {
			o.RetentionDrops = []protocol.RetentionDrop{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(o)
	})
}

// Observe reads the observation from the store. A stream's cursor is the
// lowest of its stored cursors: the point a restart resumes from. A store
// that counts its retention drops (impl.RetentionCounter: pgstore) has them
// reported; another leaves retention_drops out.
func Observe(ctx context.Context, s impl.Store) (protocol.Observation, error) {
	o := protocol.Observation{Cursors: []protocol.ObservedCursor{}, DeadLetters: []protocol.DeadLetter{}}
	cs, err := s.ListCursors(ctx)
	if err != nil {
		return o, err
	}
	idx := map[string]int{}
	for _, c := range cs {
		if engine.IsMarker(c.Key) {
			continue
		}
		i, ok := idx[c.Key.Stream]
		switch {
		case !ok:
			idx[c.Key.Stream] = len(o.Cursors)
			o.Cursors = append(o.Cursors, protocol.ObservedCursor{Stream: c.Key.Stream, Pos: protocol.FromPos(c.Pos)})
		case c.Pos.Compare(o.Cursors[i].Pos.Pos()) < 0:
			o.Cursors[i].Pos = protocol.FromPos(c.Pos)
		}
	}
	ms, err := s.ListMessages(ctx, "")
	if err != nil {
		return o, err
	}
	depth := 0
	for _, m := range ms {
		if m.Dead {
			o.DeadLetters = append(o.DeadLetters, protocol.DeadLetter{Bot: m.Subscriber, Event: m.EventID, Attempts: m.Attempts})
		} else {
			depth++
		}
	}
	o.QueueDepth = &depth
	if rc, ok := s.(impl.RetentionCounter); ok {
		ds, err := rc.RetentionDrops(ctx)
		if err != nil {
			return o, err
		}
		o.RetentionDrops = []protocol.RetentionDrop{}
		for _, d := range ds {
			o.RetentionDrops = append(o.RetentionDrops, protocol.RetentionDrop{Bot: d.Subscriber, TTL: d.TTL, Cap: d.Cap})
		}
	}
	return o, nil
}
