// Package model is the sequential specification of impl.Store: a pure,
// value-semantics store that the conformance suite compares every backend
// against (contract scripts, the rapid state machine, porcupine's
// linearizability check). The run checker, which judges a whole simulated
// run against the delivery invariants, lives in model/oracle.
package model
