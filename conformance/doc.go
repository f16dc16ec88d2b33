// Package conformance certifies that a backend implements the store
// contract (impl.Store) the way the reference model (model.Store) says.
//
// # Certifying a backend
//
// Describe the backend with a Factory and call Run from a test:
//
//	func TestMyStore(t *testing.T) {
//		conformance.Run(t, conformance.Factory{
//			Name: "mystore",
//			New: func(t testing.TB) impl.Store {
//				s := mystore.Open(t.TempDir()) // fresh and empty every time
//				t.Cleanup(func() { _ = s.Close() })
//				return s
//			},
//			Features: conformance.Features{Concurrent: true},
//		})
//	}
//
// New must return a store nobody else uses, empty, and register its own
// cleanup on the t it is given (the suite may pass a scoped t whose cleanups
// run early). It may t.Skip when its server is unavailable.
//
// Run executes three groups as subtests, each check on a fresh store:
//
//   - Contract: one fixed script per rule of the contract, with expected
//     values worked out by hand (cursor monotonicity and batch order,
//     idempotent Enqueue, leases and their expiry, retries to dead letters,
//     stale failures, requeue, TTL and per-subscriber cap boundaries,
//     delivered state, the dedup window, time normalisation, aliasing).
//   - StateMachine: rapid draws random call sequences over a tiny key space
//     and compares every result, and the whole cursor and queue state after
//     every step, with model.Store. Failures are shrunk and print each call
//     and how to replay them in the caller's own terms (--rapid-seed N for
//     certify and Main, RapidSeed for Check, -rapid.seed=N under go test).
//     rapid's
//     fail files are neither written nor read: a file left under
//     testdata/rapid by an earlier run never changes what a run checks.
//   - Linearizability (Features.Concurrent): goroutines call the store at
//     once; porcupine checks the history against model.Store, per key. A
//     violation names the key and the smallest window of its calls found
//     that no order explains (with the state the calls before it leave),
//     writes an HTML timeline under ArtifactsDir (default
//     DefaultArtifactsDir: $DELIVERYSIM_ARTIFACTS, else a folder of the
//     run's own under the system temp folder) and prints its path. When
//     Contract or StateMachine checks failed in the same run, it says so
//     first: a store wrong one call at a time fails the concurrent checks
//     too, and a race is not the first suspect. A timeout counts as a failure to
//     decide, never as a pass. The group forces interleavings rather than
//     hoping for them: GOMAXPROCS above the core count while a history is
//     recorded, each client's calls paced by its own random stream (back
//     to back, a yield, a busy spin or a sleep of up to 100µs, before and
//     after every call), and in HotKeys sixteen clients on one key of each
//     kind beside a client that keeps the store busy without a pause, so
//     that a lock released between a read and a write inside one method is
//     handed to the waiting calls (a planted read-then-write race in
//     memstore is caught in 20 of 20 runs, and was in 0 of 20 before). The
//     seed of the clients' calls and pacing is fresh per run and printed
//     (Seed replays the calls; the interleaving stays the scheduler's).
//     HandOff (on a store that offers impl.HandOffWriter) races hand-offs with the calls on
//     the same rows and cursor, the same way: a hand-off must be one
//     atomic call, and one at snapshot isolation is not (two hand-offs
//     that ack and enqueue each other's keys can both commit; a
//     REPEATABLE READ pgstore variant is caught in 6 of 6 runs, the same
//     SQL at SERIALIZABLE passes).
//
// # Optional capabilities
//
// The suite finds the optional capabilities a store implements
// (impl.LeasingEnqueuer, impl.HandOffWriter, impl.BlindCursorWriter) with
// impl.AsLeasingEnqueuer and friends, which look through wrappers
// (impl.Wrapper), and certifies every one it finds, declared or not: the
// engine uses every one it finds (impl.LeasingEnqueuer for its direct
// hand-off, engine.HandOffDirect; without it the engine hands off queued).
// Each gets a contract script, state-machine actions and, for
// HandOffWriter, a concurrent history.
//
// Declaring is optional and does two things. Features.LeasedEnqueue,
// HandOff and BlindCursor assert that the store offers the capability:
// Contract/Capabilities, run for every backend, fails when an asserted
// capability is not found, or when a wrapper drops a capability of the
// store under it (a wrapper that embeds impl.Store and loses EnqueueLeased
// is reported, not skipped). Features.OptOut lists found capabilities the
// certification leaves out, explicitly: their checks skip with the reason.
//
// Select parts with go test -run 'TestMyStore/Contract/Claim' or the Only
// option. Features.Concurrent switches the Linearizability group on, and
// AmbiguousErrors (a fault-injecting wrapper: errors mean "may or may not
// have taken effect", the model follows both branches, and the fixed
// Contract script is skipped) relaxes the rest.
//
// # Failures
//
// Every failure names the rule of impl/store.go it enforces (Result.Rule,
// and the log under go test), the store call it is about (a Contract
// failure quotes the last three calls with their arguments and results),
// and want against got, field by field, with instants in RFC 3339.
//
// # Certifying a store from your own program
//
// A store that is not deliverysim's gets the report, flags and exit codes
// of `deliverysim certify` from a main of its own:
//
//	func main() {
//		conformance.Main(conformance.Factory{
//			Name: "mystore",
//			New: func(t testing.TB) impl.Store {
//				s := mystore.New()
//				t.Cleanup(func() { _ = s.Close() })
//				return s
//			},
//			Features: conformance.Features{Concurrent: true},
//		})
//	}
//
// It reads --json, --junit FILE, --checks N, --only LIST, --seed N and
// --rapid-seed N, prints a Certificate (as text, or as JSON with --json)
// and exits 0 when at least one check ran and none failed, 1 otherwise,
// and 2 on a bad command line (an unknown --only name among them) or a
// backend Describe cannot reach. For a Postgres-backed store,
// pgcert.Factories gives each check a schema of its own, dropped when the
// check ends, and runs the suite once per session time zone (UTC and
// America/New_York). examples/outside-store in this repository is such a
// program, for a store written from the public documents alone.
//
// # Reports instead of test failures
//
// RacyBackends plant races (correct call by call, wrong under concurrency),
// which only the Linearizability group can catch. BlindSpotBackends plant
// what the suite once missed: a ListMessages that pages by (Subscriber,
// CreatedAt) with no EventID tie-break, which only a check with hundreds
// of equal CreatedAt sees (Contract/ManyEqualCreatedAt), and a Requeue
// that leaves the dead row beside the revived one (Contract/Requeue counts
// the rows of the key).
//
// Check runs the same checks without a *testing.T and returns a Report (one
// Result per check; Passed, Failures, String, JSON); Certify runs it per
// configuration and gathers a Certificate. Both work in any program, not
// only in a test binary. CLIs use them to certify a backend; the suite uses it to prove that BuggyBackends — wrappers that
// plant one known bug each in any store — are all caught.
//
// # What the suite does not decide
//
// The contract leaves a few things open and the suite never exercises them:
// an ID both upserted and deleted in one RecordDelivered call, Fail with an
// empty owner, negative Claim limits or trim caps. Empty and nil byte
// slices are treated as equal. Times must read back exactly as
// impl.TimeOf(impl.NanosOf(t)).
//
// rapid reads its settings from process-wide flags; the suite changes them
// (fail files off, the RapidChecks/RapidSteps/ShrinkTime options)
// only while its own state machine runs, and serialises its rapid runs.
// Do not run other rapid tests in parallel with Check.
package conformance
