// Package schema is the run-time switch of a mutant schemata build: the
// guarded copies of the mutated packages (go build -overlay) call On(k) at
// every mutation site, and exactly the mutant named by DELIVERYSIM_MUTANT
// is on. No ordinary build imports this package.
package schema

import (
	"os"
	"strconv"
	"sync/atomic"
)

// EnvVar names the mutant that is on (its run-time number); unset or
// empty, none is.
const EnvVar = "DELIVERYSIM_MUTANT"

var active = func() int {
	n, err := strconv.Atoi(os.Getenv(EnvVar))
	if err != nil {
		return -1
	}
	return n
}()

var reached atomic.Bool

// On reports whether mutant k is the one switched on, and notes that its
// site ran.
func On(k int) bool {
	if k != active {
		return false
	}
	reached.Store(true)
	return true
}

// Reached reports whether the active mutant's site ever ran: a survivor
// whose site never ran points at a workload gap, not at an equivalent
// mutant.
func Reached() bool { return reached.Load() }
