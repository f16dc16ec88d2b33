// Package scenarios is the declarative side of deliverysim: scenario files
// that fix a whole simulation (topology, exact workload, explicit or random
// faults, engine configuration, expected outcome), the library of scenarios
// that tells every failure story of the source documents, the known-bug
// variants each one exposes, the mutant report (is every variant caught, by
// its scenario and by a blind random sweep?), and the minimizer that turns
// a failing run into a small scenario file failing the same way.
//
// SCHEMA.md documents the file format.
package scenarios
