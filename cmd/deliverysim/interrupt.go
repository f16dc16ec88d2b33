package main

import (
	"context"
	"fmt"

	"github.com/deliverysim/deliverysim/scenarios"
)

// holdMinimizingEnv, set to anything, holds run's minimization until
// SIGINT or SIGTERM: a hook for the signal tests, which must interrupt a
// minimization that may otherwise end within milliseconds.
const holdMinimizingEnv = "DELIVERYSIM_TEST_HOLD_MINIMIZING"

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
	wait := (<-chan result)(done)
	if a.getenv(holdMinimizingEnv) != "" {
		// For the signal tests only: the minimizer's outcome is ignored
		// and the invocation waits for its signal, so a test interrupts
		// it while minimizing however fast the minimization would end.
		fmt.Fprintf(a.stderr, "deliverysim: minimizing, held until a signal (%s is set)\n", holdMinimizingEnv)
		wait = nil
	}
	select {
	case r := <-wait:
		return r.m, r.err
	case <-a.ctx.Done():
		return nil, context.Cause(a.ctx)
	}
}
