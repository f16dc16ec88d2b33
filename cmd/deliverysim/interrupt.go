package main

import (
	"context"

	"github.com/deliverysim/deliverysim/scenarios"
)

// interrupted tells whether SIGINT or SIGTERM has stopped the invocation.
func (a *app) interrupted() bool { return a.ctx.Err() != nil }

// minimizeInterruptible is scenarios.Minimize that gives up when the
// invocation is interrupted. Minimize takes no context and may run for a
// minute; it only computes (in-memory runs, no files), so abandoning it
// leaves nothing behind: the process exits right after.
func (a *app) minimizeInterruptible(s *scenarios.Scenario, opts scenarios.MinimizeOptions) (*scenarios.Minimized, error) {
	type result struct {
		m   *scenarios.Minimized
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := scenarios.Minimize(s, opts)
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		return r.m, r.err
	case <-a.ctx.Done():
		return nil, context.Cause(a.ctx)
	}
}
