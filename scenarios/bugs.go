package scenarios

import (
	"fmt"
	"sort"
	"strings"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// Variant is one known-bug engine variant: a "today" behaviour of the
// source documents, switched on in the reference engine.
type Variant struct {
	Name   string
	Source string // where the documents describe it
	Doc    string // what the engine then does
	set    func(*engine.Bugs)
}

// Set switches the variant on in b.
func (v Variant) Set(b *engine.Bugs) { v.set(b) }

// Variants lists every known-bug variant, in report order.
func Variants() []Variant { return append([]Variant(nil), variants...) }

var variants = []Variant{
	{"fresh-sync-on-boot", "seed 000, problem 1", "on start the tracker subscribes from the upstream head, skipping what was sealed while it was down",
		func(b *engine.Bugs) { b.FreshSyncOnBoot = true }},
	{"no-receiver-dedup", "seed 000, problem 2 and bot-side dedup gap", "the bot SDK keeps no seen-event cache, so a replay runs handlers again",
		func(b *engine.Bugs) { b.NoReceiverDedup = true }},
	{"no-requeue-on-failure", "seed 000, problem 3", "a failed webhook call (timeout, 5xx, refused) is logged and dropped, not retried",
		func(b *engine.Bugs) { b.NoRequeueOnFailure = true }},
	{"no-retention", "seed 000, problem 4; seed 003", "queued messages have no TTL and no per-bot cap; the cleaner never runs",
		func(b *engine.Bugs) { b.NoRetention = true }},
	{"delete-before-send", "seed 000, enqueued-messages race", "queued messages are deleted when claimed, before they are sent",
		func(b *engine.Bugs) { b.DeleteBeforeSend = true }},
	{"unguarded-cursor-writes", "seed 000, design decisions", "cursor writes are fire-and-forget blind upserts issued before hand-off, so they land out of order",
		func(b *engine.Bugs) { b.UnguardedCursorWrites = true }},
	{"timestamp-only-cursor", "seed 004, cursor comparison", "timestamp cursors compare created_at alone: equal timestamps and late events are skipped",
		func(b *engine.Bugs) { b.TimestampOnlyCursor = true }},
	{"shared-snapshot-baseline", "seed 002, problem statement", "changes are computed against one snapshot per source, so one app's success hides changes from another",
		func(b *engine.Bugs) { b.SharedSnapshotBaseline = true }},
	{"breaker-drops-when-open", "seed 001, circuit breaker", "an open circuit answers with the fallback and drops the message instead of deferring it",
		func(b *engine.Bugs) { b.BreakerDropsWhenOpen = true }},
	{"unbounded-retry", "seed 001 dead letter queue; seed 004 I5", "failures are retried forever: no dead letter, a poison message never stops",
		func(b *engine.Bugs) { b.UnboundedRetry = true }},
	{"no-clock-skew-budget", "seed 003 cleanup with skewed node clocks", "the TTL is judged by the cleaner's clock alone, so a fast clock deletes young messages",
		func(b *engine.Bugs) { b.NoClockSkewBudget = true }},
	{"retention-ignores-lease", "seed 003, DeleteExpiredEnqueuedMessages", "cleanup deletes by age and count even while a message is being delivered",
		func(b *engine.Bugs) { b.RetentionIgnoresLease = true }},
	{"trim-keeps-oldest", "seed 003, per-bot cap", "the per-bot cap deletes the newest messages and keeps the oldest",
		func(b *engine.Bugs) { b.TrimKeepsOldest = true }},
	{"shared-inflight-slot", "seed 001 isolation; seed 004 I5 (no DoS of other consumers)", "one send in flight across all bots: a slow or dead bot holds up every other bot",
		func(b *engine.Bugs) { b.SharedInflightSlot = true }},
	{"forget-unconfirmed-create", "seed 002, phase 4 (record delivery only after success)", "an item is recorded only after a 2xx, so a CREATE the app processed but whose answer was lost is never followed by its DELETE",
		func(b *engine.Bugs) { b.ForgetUnconfirmedCreates = true }},
	{"purge-queue-on-leave", "seed 000, tracking scope (remove streams when bots leave)", "a bot leaving a stream loses the messages still queued for it from there",
		func(b *engine.Bugs) { b.PurgeQueueOnLeave = true }},
	{"cursor-before-direct-answer", "seed 000, persist the cookie (with sends that write no row)", "with direct hand-off the cursor moves over an event when it is sent, not when it is answered, so a crash in between loses it",
		func(b *engine.Bugs) { b.CursorBeforeDirectAnswer = true }},
}

// Variant returns the variant called name.
func VariantNamed(name string) (Variant, bool) {
	for _, v := range variants {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// VariantNames lists the variant names, sorted.
func VariantNames() []string {
	ns := make([]string, len(variants))
	for i, v := range variants {
		ns[i] = v.Name
	}
	sort.Strings(ns)
	return ns
}

// ParseBugs turns names into engine switches; it returns the distinct
// names, sorted.
func ParseBugs(names []string) (engine.Bugs, []string, error) {
	var b engine.Bugs
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		v, ok := VariantNamed(n)
		if !ok {
			return b, nil, fmt.Errorf("unknown bug %q; known: %s", n, strings.Join(VariantNames(), ", "))
		}
		v.Set(&b)
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return b, out, nil
}
