// Package chaos is a real-process fault harness on loopback. It runs a
// real upstream (streams with sealing and replay) and registry
// (runtime/protoserver), N webhook servers verifying with impl/receiver,
// a TCP proxy between the engine and Postgres, and the engine under test
// as a child process. On a seeded schedule it SIGKILLs and restarts the
// engine, cuts or stalls its database connections and breaks bots; then
// it heals, waits (bounded) for quiescence and judges what it observed —
// productions, requests received by the bots and their answers, handler
// runs, the store's queue and cursors — with the simulator's checker
// (model/oracle).
//
// Real time is not deterministic: the seed fixes the workload's shape and
// the fault schedule, not the interleaving. A failing seed is a plan to
// rerun, not a replay.
package chaos
