package sim

import (
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Clocks that jump while a node runs. A boot draws a node's offset once;
// a real host's clock is also stepped under a running process (an NTP
// step, an operator's date, a VM resumed from a pause), forward or back.
// The engine promises to tolerate clocks that differ by at most its
// ClockSkewBudget, so a jump only ever moves a node's offset within
// ±ClockJumps.Bound, and the world's budget covers twice that bound
// (raiseSkewFloor): a jump past it would be a misconfiguration the TTL
// rule cannot survive, not a fault it must. Timers already set keep their
// instant in true time (time.AfterFunc measures a duration, not the wall
// clock), so a node whose clock went back meets its timers early and one
// whose clock went forward meets them late.

// ClockJumps is the jump schedule of a world (empty: no jumps).
type ClockJumps struct {
	// Bound is the largest |offset| a jump may leave a node's clock at
	// (a node booted further off than it keeps that bound instead).
	Bound time.Duration
	Jumps []ClockJump
}

// ClockJump steps node Node's clock at At (since Epoch): by By, or, with
// Step, back to true time (an NTP step that corrects the whole offset).
// The result is clamped to the bound. A node that is down then is not
// stepped (its next boot draws its clock afresh).
type ClockJump struct {
	At   time.Duration
	Node int // index, 0-based
	By   time.Duration
	Step bool
}

// MaxJumpBound keeps a backward jump (which delays every wait of the node
// by its size) well inside the liveness bound of a drawn world, and a
// node's stamps inside the receivers' tolerance (5 minutes either way, a
// bound the skew budget does not move: seed 9492 had a node 5 minutes
// behind whose requests a receiver rightly refused as too old).
const MaxJumpBound = 2 * time.Minute

// validate says what is wrong with an explicit jump schedule.
func (cj ClockJumps) validate(nodes int, window time.Duration) error {
	if len(cj.Jumps) == 0 {
		return nil
	}
	if cj.Bound <= 0 || cj.Bound > faults.MaxClockOffset {
		return fmt.Errorf("workload: ClockJumps.Bound is %v; use (0, %v]", cj.Bound, faults.MaxClockOffset)
	}
	for i, j := range cj.Jumps {
		if j.Node < 0 || j.Node >= nodes {
			return fmt.Errorf("workload: clock jump %d names node index %d; the world has %d nodes (0-based)", i, j.Node, nodes)
		}
		if j.At < 0 || j.At > window {
			return fmt.Errorf("workload: clock jump %d is at %v; use [0, FaultWindow %v]", i, j.At, window)
		}
		if j.By < -2*faults.MaxClockOffset || j.By > 2*faults.MaxClockOffset {
			return fmt.Errorf("workload: clock jump %d is by %v; use at most %v either way", i, j.By, 2*faults.MaxClockOffset)
		}
	}
	return nil
}

// drawClockJumps gives one world in four jumping clocks, from its own
// stream (every other draw of a seed stays what it was). Half of them
// put the bound at half the skew budget, so that two clocks at opposite
// ends of it differ by the budget exactly; the others choose it freely
// (raiseSkewFloor then lifts the budget to cover it).
func drawClockJumps(seed uint64, w *Workload) {
	r := actorRand(seed, "workload/clock-jumps")
	if r.IntN(4) != 0 {
		return
	}
	if !w.SkewBudgetSet {
		w.SkewBudgetSet, w.ClockSkewBudget = true, w.EngineConfig().ClockSkewBudget
	}
	bound := w.ClockSkewBudget / 2
	if bound < time.Second || bound > MaxJumpBound || r.IntN(2) == 0 {
		bound = between(r, time.Second, MaxJumpBound)
	}
	cj := ClockJumps{Bound: bound}
	for n := 1 + r.IntN(6); n > 0; n-- {
		j := ClockJump{At: between(r, 0, w.FaultWindow), Node: r.IntN(w.Nodes)}
		switch r.IntN(5) {
		case 0:
			j.Step = true
		case 1: // a small correction, either way
			j.By = between(r, time.Millisecond, time.Second)
		case 2: // to the edge of the bound (the clamp lands it there exactly)
			j.By = 2 * bound
		default:
			j.By = between(r, time.Second, 2*bound)
		}
		if r.IntN(2) == 0 {
			j.By = -j.By
		}
		cj.Jumps = append(cj.Jumps, j)
	}
	w.ClockJumps = cj
}

// jumpFloor is the offset bound the world's jumps need the skew budget
// to cover (per clock: twice it between two clocks).
func (w *Workload) jumpFloor() time.Duration {
	if len(w.ClockJumps.Jumps) == 0 {
		return 0
	}
	return w.ClockJumps.Bound
}

func (s *sim) setupClockJumps() {
	for _, j := range s.w.ClockJumps.Jumps {
		s.at(Epoch.Add(j.At), func() { s.jumpClock(s.nodes[j.Node], j) })
	}
}

// jumpClock steps n's clock as j says, within the bound (or within the
// offset n booted with, if that is larger).
func (s *sim) jumpClock(n *node, j ClockJump) {
	if !n.up {
		return
	}
	bound := max(s.w.ClockJumps.Bound, absDur(n.bootOffset))
	to := addSat(n.offset, j.By)
	if j.Step {
		to = 0
	}
	to = min(max(to, -bound), bound)
	if to == n.offset {
		return
	}
	before := nodeClock{n}.Now()
	n.offset = to
	after := nodeClock{n}.Now()
	if after.After(before) {
		n.fwd += after.Sub(before)
	}
	s.rec(n.name, "clock-jump", "by", after.Sub(before), "offset", to, "incarnation", n.inc)
	s.cov.jumped(n, after.Sub(before), j.Step)
	s.observe(oracle.Observation{Kind: oracle.ObsClockJump, Node: n.name, Clock: after, Jump: after.Sub(before)})
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// Clock-jump probe names (coverage catalogue).
const (
	CovJumpForwardSmall  = "clock-jump/forward-up-to-1s"
	CovJumpBackwardSmall = "clock-jump/backward-up-to-1s"
	CovJumpForwardLarge  = "clock-jump/forward-past-the-lease"
	CovJumpBackwardLarge = "clock-jump/backward-past-the-lease"
	CovJumpStep          = "clock-jump/ntp-step-to-true-time"
	CovJumpToBound       = "clock-jump/to-the-edge-of-the-bound"
	CovJumpInFlight      = "clock-jump/while-requests-in-flight"
)

var jumpProbes = []Probe{
	{CovJumpForwardSmall, "a running node's clock was stepped forward by 1s or less"},
	{CovJumpBackwardSmall, "a running node's clock was stepped back by 1s or less"},
	{CovJumpForwardLarge, "a running node's clock was stepped forward by more than the lease"},
	{CovJumpBackwardLarge, "a running node's clock was stepped back by more than the lease"},
	{CovJumpStep, "a running node's offset clock was stepped back to true time (an NTP step)"},
	{CovJumpToBound, "a running node's clock was stepped to exactly the largest offset the world's skew budget covers"},
	{CovJumpInFlight, "a running node's clock was stepped while it had requests unanswered"},
}

// jumped counts a step of n's clock by by.
func (c *coverage) jumped(n *node, by time.Duration, step bool) {
	lease := c.s.ecfg.Lease
	switch {
	case step:
		c.hit(CovJumpStep)
	case by > 0 && by <= time.Second:
		c.hit(CovJumpForwardSmall)
	case by < 0 && by >= -time.Second:
		c.hit(CovJumpBackwardSmall)
	case by > lease:
		c.hit(CovJumpForwardLarge)
	case by < -lease:
		c.hit(CovJumpBackwardLarge)
	}
	if absDur(n.offset) == c.s.w.ClockJumps.Bound {
		c.hit(CovJumpToBound)
	}
	if c.nodeOpen[n.name] > 0 {
		c.hit(CovJumpInFlight)
	}
}

// lateBound is when a late answer may reach its node: once the node's
// clock has passed at, the instant by which its engine has given the
// request up, plus every step forward its clock made since the send (the
// engine gives requests up at its housekeeping, every cleanup interval of
// true time, and a step forward since the last one leaves the clock that
// much ahead of what that housekeeping saw: seed 3523).
type lateBound struct {
	at  time.Time
	fwd time.Duration // the node's steps forward at the send
}

// handLate hands a late answer to node incarnation inc once its clock has
// passed b. The bot answers when b was due by the clock the node had at
// the send; a clock stepped since then has not got there yet, and the
// answer waits for it (it stays late, which is what it models: an answer
// the engine no longer waits for).
func (s *sim) handLate(n *node, inc int, b lateBound, hand func()) {
	due := b.at.Add(n.fwd - b.fwd)
	if n.inc != inc || !n.up || !(nodeClock{n}).Now().Before(due) {
		hand()
		return
	}
	s.at(n.virtualTime(due), func() {
		if n.inc != inc || !n.up {
			s.rec(n.name, "result-lost", "late", true)
			return
		}
		s.handLate(n, inc, b, hand)
	})
}
