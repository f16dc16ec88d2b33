package engine

import (
	"strings"
	"time"
)

type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func (s breakerState) String() string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// breaker is seed 001's per-bot circuit breaker. Open only defers: the
// bot's messages stay queued and are claimed again once it half-opens.
type breaker struct {
	state     breakerState
	failures  int // consecutive, while closed
	successes int // while half-open
	openUntil time.Time
	timerID   uint64
}

func (e *Engine) breakerSuccess(b *botState) {
	switch b.br.state {
	case breakerClosed:
		b.br.failures = 0
	case breakerHalfOpen:
		b.br.successes++
		if b.br.successes >= e.cfg.BreakerCloseAfter {
			e.breakerMove(b, breakerClosed)
		}
	}
	// A late success while open (a request sent before it opened) changes
	// nothing: the open period runs its course.
}

func (e *Engine) breakerFailure(b *botState) {
	switch b.br.state {
	case breakerClosed:
		b.br.failures++
		if b.br.failures >= e.cfg.BreakerFailures {
			e.breakerMove(b, breakerOpen)
		}
	case breakerHalfOpen:
		e.breakerMove(b, breakerOpen)
	}
}

func (e *Engine) breakerMove(b *botState, to breakerState) {
	from := b.br.state
	b.br.state = to
	b.br.failures = 0
	b.br.successes = 0
	if to == breakerOpen {
		e.cnt.BreakerOpened++
		b.br.openUntil = e.now.Add(e.cfg.BreakerOpenFor)
		b.br.timerID = e.setTimer(timerInfo{kind: timerBreaker, bot: b.id, at: b.br.openUntil})
	}
	e.note(Note{Kind: "breaker", Bot: b.id, Detail: from.String() + "->" + to.String()})
}

func (e *Engine) onBreakerTimer(id uint64, t timerInfo) {
	b := e.bots[t.bot]
	if b == nil || b.br.state != breakerOpen || b.br.timerID != id {
		return
	}
	if e.now.Before(b.br.openUntil) {
		b.br.timerID = e.setTimer(timerInfo{kind: timerBreaker, bot: b.id, at: b.br.openUntil})
		return
	}
	e.breakerMove(b, breakerHalfOpen)
	e.pump(b)
}

// BreakerMovedTo reads a "breaker" note's Detail ("from->to", the states
// "closed", "open" and "half-open") and returns the state the breaker
// moved to. It is the one reader of that format, for the runtime's gauge
// and the simulator's counts.
func BreakerMovedTo(detail string) (to string, ok bool) {
	_, to, ok = strings.Cut(detail, "->")
	return to, ok
}
