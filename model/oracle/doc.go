// Package oracle is the run checker: it judges one simulated run, from the
// observations the simulator records in trace order and the store's final
// committed state, against the delivery invariants of SPEC.md (Invariants).
// Each invariant has a stable name (Inv*) used in reports, JSON and scenario
// files. The sequential store specification is a different oracle and lives
// in package model.
package oracle
