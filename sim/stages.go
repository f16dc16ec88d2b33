package sim

import "time"

// Stage is a part of a run that a StageTimer charges time to.
type Stage int

const (
	// StageSim is everything not in another stage: the event loop, the
	// upstream, the bots and their receiver SDKs, fault injection, the
	// store wrappers and the contract probes.
	StageSim Stage = iota
	// StageEngine is engine.Engine.Step, including the store calls it
	// makes, minus the observation, coverage and trace work they cause.
	StageEngine
	// StageOracle is the checker: oracle.Checker.Observe and Finish.
	StageOracle
	// StageCoverage is the coverage catalogue's bookkeeping per
	// observation and at the end.
	StageCoverage
	// StageTrace is building and hashing the trace.
	StageTrace
	NumStages
)

var stageNames = [NumStages]string{"sim", "engine", "oracle", "coverage", "trace"}

func (s Stage) String() string { return stageNames[s] }

// StageTimer splits a run's wall time between its stages, each instant
// charged to the innermost stage entered (exclusive time). It is for
// benchmarks (bench.BenchmarkSweep): Now is the caller's monotonic clock,
// since the simulator reads no clock of its own, and a run without a timer
// (Config.Stages nil) pays one nil check per stage boundary.
type StageTimer struct {
	Now   func() time.Duration
	Spent [NumStages]time.Duration

	cur  Stage
	last time.Duration
}

// Start begins charging time to StageSim (before a run).
func (t *StageTimer) Start() { t.cur, t.last = StageSim, t.Now() }

// Stop charges the time since the last boundary (after a run).
func (t *StageTimer) Stop() { t.switchTo(StageSim) }

func (t *StageTimer) switchTo(s Stage) Stage {
	now := t.Now()
	t.Spent[t.cur] += now - t.last
	t.last = now
	prev := t.cur
	t.cur = s
	return prev
}

// enter starts charging st (if the run has a timer) and returns the stage
// to go back to with leave.
func (s *sim) enter(st Stage) Stage {
	if s.cfg.Stages == nil {
		return 0
	}
	return s.cfg.Stages.switchTo(st)
}

func (s *sim) leave(prev Stage) {
	if s.cfg.Stages != nil {
		s.cfg.Stages.switchTo(prev)
	}
}
