// Package faults names every fault the simulator can inject, describes one
// fault at one place (Fault), which kinds a run enables and how often (a
// Plan, drawn per seed for swarm testing), draws from a plan the explicit
// schedule of a run before it starts (Plan.Schedule), and wraps a store so
// that its calls fail as an Injector decides.
//
// There is one fault path: a schedule (explicit faults and drawn chances)
// goes in, and every fault that fires comes out as the Fault it became,
// which replays the run exactly (the minimizer works on those values, never
// on trace text).
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

	// WebhookHang and ResultLost: the engine is never told how a request
	// ended. A real runtime loses outcomes when its HTTP client has no
	// working timeout (a connection that hangs forever), or when the worker
	// that carried the request dies after sending it. The engine defends
	// itself by expiring a request it has waited on for a lease
	// (engine.Config.Lease, at its next housekeeping): the message is
	// claimable again, or, sent directly, recorded as a failed attempt.
	//
	// WebhookHang: the connection hangs before the bot reads the request;
	// the bot never processes it and no answer ever comes (the message is
	// delivered only if the engine sends it again).
	WebhookHang Kind = "webhook-hang"
	// ResultLost: the bot processes the request and answers, but the
	// runtime never hands the answer to the engine (a resend is then a
	// duplicate, which the receiver drops).
	ResultLost Kind = "result-lost"

	// Webhook4xx: the bot answers a client error (Status, a 4xx) to every
	// request for a while, without processing it: a misconfigured or
	// retired endpoint, a payload it refuses, a rate limit. Drawn episodes
	// last up to the plan's Max or until the heal (for the engine, a bot
	// that refuses for good); a scheduled one covers [At, Until), Until
	// never for good. The engine's policy for each status is
	// impl.PermanentStatus.
	Webhook4xx Kind = "webhook-4xx"

	// WebhookLate: the connection hangs as with webhook-hang, but the bot
	// does read the request in the end and answers it, after the engine's
	// documented expiry bound (a lease plus a cleanup interval, by the
	// node's clock) and up to the plan's Max past it. The request is in
	// flight for all that time, past its claim's lease: another node may
	// claim the message and send it meanwhile. The bot processes the
	// request when it answers (a 2xx delivered the event; a resend
	// arriving before or after is a duplicate the receiver drops). The
	// runtime hands the answer to the node, which has given up on the
	// request by then and must ignore it (engine.WebhookResult): it is
	// not an outcome the engine learned.
	WebhookLate Kind = "webhook-late"
)

// allKinds is the kind list. Its order is part of every seed's fault
// plan: Draw and Plan.Schedule walk it, drawing for each kind in turn, so
// a new kind goes at the END (a kind inserted earlier shifts the draws of
// every kind after it, and every old seed would get a different plan).
// TestKindsOnlyGrowAtTheEnd holds the list as it was.
//
// Adding a kind: its constant and its row in kinds (target), its draw in
// drawParams (plan.go), and its injection point in the simulator; only a
// kind with filters beyond its target also needs a case in Fault.Matches.
var allKinds = func() []Kind {
	ks := make([]Kind, len(kinds))
	for i, k := range kinds {
		ks[i] = k.kind
	}
	return ks
}()

// Target is what a kind's faults hit.
type Target string

const (
	OnNode     Target = "node"   // an engine node (steps, crash points, clock, store calls)
	OnBot      Target = "bot"    // a bot's webhook endpoint
	OnStream   Target = "stream" // an upstream stream's batches (optionally to one node)
	OnRegistry Target = ""       // the registry (names a stream and a bot when it fires)
)

var kinds = []struct {
	kind   Kind
	target Target
}{
	{Crash, OnNode}, {CrashAfterStoreWrite, OnNode}, {CrashAfterSend, OnNode}, {CrashAfterProcess, OnNode},
	{WebhookTimeout, OnBot}, {Webhook5xx, OnBot}, {WebhookRefused, OnBot}, {WebhookSlow, OnBot}, {WebhookDuplicate, OnBot},
	{UpstreamDuplicate, OnStream}, {UpstreamReorder, OnStream},
	{ClockOffset, OnNode}, {ClockDrift, OnNode},
	{StoreError, OnNode}, {StoreAmbiguous, OnNode},
	{MembershipChurn, OnRegistry}, {LateKey, OnBot},
	{WebhookHang, OnBot}, {ResultLost, OnBot},
	{Webhook4xx, OnBot},
	{WebhookLate, OnBot},
	// New kinds here, at the end.
}

// TargetOf is what faults of kind k hit.
func TargetOf(k Kind) Target {
	for _, r := range kinds {
		if r.kind == k {
			return r.target
		}
	}
	return OnRegistry
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
