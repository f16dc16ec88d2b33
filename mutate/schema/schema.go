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

// CoverEnvVar, set to the number of mutation sites, runs the build with no
// mutant on and records which sites run (Covered): a seed that never runs
// a mutant's site behaves exactly as the original there, so only the seeds
// that run it are worth a mutant's seed budget.
const CoverEnvVar = "DELIVERYSIM_MUTANT_COVER"

var active = func() int {
	n, err := strconv.Atoi(os.Getenv(EnvVar))
	if err != nil {
		return -1
	}
	return n
}()

var cover = func() []atomic.Bool {
	n, err := strconv.Atoi(os.Getenv(CoverEnvVar))
	if err != nil || n <= 0 {
		return nil
	}
	return make([]atomic.Bool, n)
}()

var reached atomic.Bool

// On reports whether mutant k is the one switched on, and notes that its
// site ran.
func On(k int) bool {
	if cover != nil {
		if k >= 0 && k < len(cover) {
			cover[k].Store(true)
		}
		return false
	}
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

// Covering reports whether this process records coverage (CoverEnvVar).
func Covering() bool { return cover != nil }

// Covered returns the sites that ran since the last call, in order, and
// forgets them.
func Covered() []int {
	var ks []int
	for k := range cover {
		if cover[k].Load() {
			ks = append(ks, k)
			cover[k].Store(false)
		}
	}
	return ks
}
