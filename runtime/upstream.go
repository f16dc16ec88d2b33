package runtime

import (
	"context"
	"encoding/base64"
	"net/url"
	"strconv"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// upBatch is a batch, the registry version it needs applied first, and
// the subscription of its stream that fetched it.
type upBatch struct {
	b          engine.UpstreamBatch
	regVersion int64
	gen        int
}

// subscribe (re)starts the poller of one stream from where the engine
// asks; a previous poller of the stream stops, and a batch it fetched
// before it stopped is dropped (stale): the engine rewinds a stream for a
// membership that starts behind its head, and a later batch of the old
// tail reaching it after the rewind would move it past the events it
// must replay (seen under chaos: a join behind the head never backfilled).
func (l *loop) subscribe(s engine.Subscribe) {
	if stop := l.pollers[s.Stream]; stop != nil {
		stop()
	}
	l.pollGen[s.Stream]++
	gen := l.pollGen[s.Stream]
	ctx, stop := context.WithCancel(l.pollCtx)
	l.pollers[s.Stream] = stop
	l.log.Info("subscribe", "stream", s.Stream, "kind", protocol.KindName(s.Kind), "fresh", s.Fresh,
		"after", protocol.FormatAfter(s.From), "since_ms", s.Since)
	go l.poll(ctx, s, gen)
}

// firstQuery is the subscription's opening request: from the head, after
// a log position (with its cookie), or since a created_at.
func firstQuery(s engine.Subscribe, plant Plants) url.Values {
	q := url.Values{}
	switch {
	case plant.ResumeFromStart && !s.Fresh && s.Kind == engine.TimestampStream:
		q.Set("since", "0")
	case plant.ResumeFromStart && !s.Fresh:
		q.Set("after", "0.0")
	case s.Fresh:
		q.Set("from", "head")
	case s.Kind == engine.TimestampStream:
		q.Set("since", strconv.FormatInt(s.Since, 10))
	default:
		q.Set("after", protocol.FormatAfter(s.From))
		if len(s.Token) > 0 {
			q.Set("cookie", base64.StdEncoding.EncodeToString(s.Token))
		}
	}
	return q
}

// poll tails one stream: the first request replays from the subscription
// point, every later one continues from the offset the last answer gave.
// Each batch goes to the engine before the next request (backpressure: the
// poller never runs ahead of the engine by more than one batch).
func (l *loop) poll(ctx context.Context, s engine.Subscribe, gen int) {
	q := firstQuery(s, l.o.Plant)
	bo := newBackoff()
	for ctx.Err() == nil {
		q.Set("wait", l.o.PollWait.String())
		u := l.o.Upstream + protocol.PathEvents + url.PathEscape(s.Stream) + "/events?" + q.Encode()
		var b protocol.Events
		if err := getJSON(ctx, l.client, u, &b); err != nil {
			if ctx.Err() == nil {
				l.log.Warn("upstream poll failed", "stream", s.Stream, "err", err)
				bo.sleep(ctx)
			}
			continue
		}
		bo.reset()
		evs, err := b.EngineEvents()
		if err != nil {
			l.log.Error("upstream answer refused", "stream", s.Stream, "err", err)
			bo.sleep(ctx)
			continue
		}
		if len(evs) > 0 {
			cookie, _ := base64.StdEncoding.DecodeString(b.Cookie)
			batch := upBatch{b: engine.UpstreamBatch{Stream: s.Stream, Kind: s.Kind, Events: evs, Cookie: cookie}, regVersion: b.RegistryVersion, gen: gen}
			select {
			case l.batches <- batch:
			case <-ctx.Done():
				return
			}
		}
		q = url.Values{}
		q.Set("next", strconv.FormatInt(b.Next, 10))
	}
}
