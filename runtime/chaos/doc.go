// Package chaos is a real-process fault harness on loopback, and the
// certification kit for delivery engines that speak runtime/PROTOCOL.md.
// It runs a real upstream (streams with sealing and replay) and registry
// (runtime/protoserver), N webhook servers verifying with impl/receiver,
// a TCP proxy between the engine and Postgres, and the engine under test
// as a child process. On a seeded schedule it SIGKILLs and restarts the
// engine, cuts or stalls its database connections and breaks bots, while
// the workload publishes keys, joins bots behind a stream's head, moves
// and rotates bots, and poisons some events; then it heals, waits until
// every obligation is resolved (bounded), and judges (judge.go) only what
// it observed from outside — what the upstream served, the registry's
// history, the wire and the bots' handlers, kill and fault times — plus
// what the engine reports on the protocol's optional observation endpoint.
// A check that needs what the engine does not report is "not judged".
//
// Real time is not deterministic: the seed fixes the workload's shape and
// the fault schedule, not the interleaving. A failing seed is a plan to
// rerun (chaos --replay), not a replay of the interleaving.
package chaos
