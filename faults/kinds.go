// Package faults names every fault the simulator can inject, describes which
// of them a run enables and how often (a Plan), draws random plans for swarm
// testing, and wraps a store so that its calls fail on a seeded schedule.
//
// Nothing here reads a clock or global randomness: every decision comes from
// a *rand.Rand the caller seeds.
package faults

import (
	"fmt"
	"strings"
)

// Kind names one fault. The string values are stable: they appear in traces,
// JSON reports and scenario files.
type Kind string

const (
	// Crash kills an engine node right after one of its steps: the step's
	// store writes stay, its effects (sends, timers, cursor writes) are lost.
	Crash Kind = "crash"
	// CrashAfterStoreWrite, CrashAfterSend and CrashAfterProcess crash a node
	// at the engine's named crash points (engine.Config.CrashHook).
	CrashAfterStoreWrite Kind = "crash-after-store-write-before-send"
	CrashAfterSend       Kind = "crash-after-send-before-ack"
	CrashAfterProcess    Kind = "crash-after-process-before-cursor"

	// WebhookTimeout: the bot processes the request but its answer is lost;
	// the engine sees a timeout.
	WebhookTimeout Kind = "webhook-timeout"
	// Webhook5xx: the bot answers 500/502/503 without processing.
	Webhook5xx Kind = "webhook-5xx"
	// WebhookRefused starts an outage: the bot refuses connections for a while.
	WebhookRefused Kind = "webhook-refused"
	// WebhookSlow: the bot processes the request only after the engine's
	// timeout has passed (so a retry can overtake the original).
	WebhookSlow Kind = "webhook-slow"
	// WebhookDuplicate: the network delivers one request twice.
	WebhookDuplicate Kind = "webhook-duplicate"

	// UpstreamDuplicate redelivers a batch later; UpstreamReorder shuffles
	// the events inside a batch.
	UpstreamDuplicate Kind = "upstream-duplicate"
	UpstreamReorder   Kind = "upstream-reorder"

	// ClockOffset shifts a node's clock by a constant; ClockDrift makes it
	// run fast or slow.
	ClockOffset Kind = "clock-offset"
	ClockDrift  Kind = "clock-drift"

	// StoreError fails a store call before it takes effect; StoreAmbiguous
	// applies a write and then returns an error wrapping impl.ErrAmbiguous.
	StoreError     Kind = "store-error"
	StoreAmbiguous Kind = "store-ambiguous"

	// MembershipChurn adds and removes bots from streams while events flow.
	MembershipChurn Kind = "membership-churn"
	// LateKey makes bots publish their session key late (their messages wait
	// in the queue until then).
	LateKey Kind = "late-key"
)

var allKinds = []Kind{
	Crash, CrashAfterStoreWrite, CrashAfterSend, CrashAfterProcess,
	WebhookTimeout, Webhook5xx, WebhookRefused, WebhookSlow, WebhookDuplicate,
	UpstreamDuplicate, UpstreamReorder,
	ClockOffset, ClockDrift,
	StoreError, StoreAmbiguous,
	MembershipChurn, LateKey,
}

// All returns every kind in a fixed order (the order reports use).
func All() []Kind { return append([]Kind(nil), allKinds...) }

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	for _, a := range allKinds {
		if a == k {
			return true
		}
	}
	return false
}

// ParseKind returns the kind named s.
func ParseKind(s string) (Kind, error) {
	k := Kind(strings.TrimSpace(s))
	if !k.Valid() {
		names := make([]string, len(allKinds))
		for i, a := range allKinds {
			names[i] = string(a)
		}
		return "", fmt.Errorf("unknown fault kind %q (known: %s)", s, strings.Join(names, ", "))
	}
	return k, nil
}
