package engine

import (
	"errors"

	"github.com/deliverysim/deliverysim/impl"
)

var errResultCount = errors.New("store returned the wrong number of results")

// deferredWrites are the acks and sync cursor writes waiting for the next
// leased enqueue (Config.AckDelay): one store call then writes all three.
type deferredWrites struct {
	keys    []impl.MessageKey
	reqs    []request
	streams []*streamState // each once: its target is written
	armed   bool           // the flush timer is set
}

func (d *deferredWrites) empty() bool { return len(d.keys) == 0 && len(d.streams) == 0 }

// writerOf returns the store's HandOffWriter if the engine defers acks and
// cursor writes into it: AckDelay is set, the hand-off is queued with
// leased enqueues (leaser, not direct), cursors are written synchronously,
// and every layer of the store has the capability.
func writerOf(cfg Config, leaser impl.LeasingEnqueuer, direct bool, store impl.Store) impl.HandOffWriter {
	if cfg.AckDelay <= 0 || leaser == nil || direct || cfg.CursorMode != CursorSync {
		return nil
	}
	w, _ := impl.AsHandOffWriter(store)
	return w
}

func (e *Engine) deferAcks(keys []impl.MessageKey, reqs []request) {
	e.deferred.keys = append(e.deferred.keys, keys...)
	e.deferred.reqs = append(e.deferred.reqs, reqs...)
	e.armFlush()
}

func (e *Engine) deferCursors(ss []*streamState) {
	for _, s := range ss {
		s.cursorDirty = false
		if !s.cursorDeferred {
			s.cursorDeferred = true
			e.deferred.streams = append(e.deferred.streams, s)
		}
	}
	e.armFlush()
}

func (e *Engine) armFlush() {
	if e.deferred.armed {
		return
	}
	e.deferred.armed = true
	e.setTimer(timerInfo{kind: timerFlush, at: e.now.Add(e.cfg.AckDelay)})
}

func (e *Engine) onFlushTimer() {
	e.deferred.armed = false
	if e.deferred.empty() {
		return
	}
	if _, err := e.writeHandOff(nil); err != nil {
		e.storeErr("hand-off", err)
	}
}

// enqueueLeased is the leased enqueue of a hand-off, carrying whatever
// acks and cursor writes are deferred.
func (e *Engine) enqueueLeased(msgs []impl.Message) ([]bool, error) {
	if e.writer == nil || e.deferred.empty() {
		return e.leaser.EnqueueLeased(e.ctx, msgs)
	}
	return e.writeHandOff(msgs)
}

// writeHandOff writes the deferred acks, msgs (leased) and the deferred
// cursors in one store call, in that order: each cursor's own messages
// were enqueued by an earlier call, so it never gets ahead of them. If the
// call fails the acks become pending ops and the cursors dirty, both
// retried by the store-retry timer, as when their own calls fail; the
// error is returned for the enqueue to report.
func (e *Engine) writeHandOff(msgs []impl.Message) ([]bool, error) {
	d := e.deferred
	e.deferred = deferredWrites{armed: d.armed}
	w := impl.HandOffWrite{Ack: d.keys, Enqueue: msgs}
	if len(d.streams) > 0 {
		w.Cursors = make([]impl.Cursor, len(d.streams))
		for i, s := range d.streams {
			s.cursorDeferred = false
			w.Cursors[i] = s.target
		}
	}
	res, err := e.writer.WriteHandOff(e.ctx, w)
	if err == nil && (len(res.Inserted) != len(msgs) || len(res.Written) != len(w.Cursors)) {
		err = errResultCount
	}
	if err != nil {
		for i, k := range d.keys {
			e.pendAck(k, d.reqs[i])
		}
		for _, s := range d.streams {
			s.cursorDirty = true
		}
		e.armRetry()
		return nil, err
	}
	if len(d.keys) > 0 {
		e.acked(d.keys, d.reqs, res.Acked)
	}
	for i, s := range d.streams {
		if res.Written[i] {
			e.cursorStored(s, w.Cursors[i])
		}
	}
	return res.Inserted, nil
}
