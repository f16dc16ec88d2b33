package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/deliverysim/deliverysim/report"
	"github.com/deliverysim/deliverysim/scenarios"
	"github.com/deliverysim/deliverysim/sim"
)

// maxArtifactSeeds bounds how many failing seeds of a sweep get
// artifacts: each is re-run and minimized, which takes seconds.
const maxArtifactSeeds = 10

// runArtifacts is what writeRunArtifacts wrote for one failing run.
type runArtifacts struct {
	Dir       string     `json:"dir"`
	Trace     string     `json:"trace"`     // the full trace
	Scenario  string     `json:"scenario"`  // the run as an explicit scenario file
	Minimized *minReport `json:"minimized"` // the reduced scenario, if minimization worked
	Report    string     `json:"report"`    // the run's JSON report
	HTML      string     `json:"html"`      // the run's HTML report (timeline, violations, verdicts)
}

// writeRunArtifacts writes everything needed to look at one failing run
// again into dir: its trace, the run as a scenario, the minimized scenario
// the run's JSON report and its HTML report. It is the one place a failing run's files are
// made (sweep --artifacts uses it per failing seed); a new artifact kind
// belongs here.
func (a *app) writeRunArtifacts(dir string, t *runTarget, r *sim.Result, rep *runReport) (*runArtifacts, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := &runArtifacts{Dir: dir, Trace: filepath.Join(dir, "trace.txt"),
		Scenario: filepath.Join(dir, "scenario.yaml"), Report: filepath.Join(dir, "report.json"),
		HTML: filepath.Join(dir, "report.html")}
	if err := os.WriteFile(out.Trace, r.TraceText(), 0o644); err != nil {
		return nil, err
	}
	s, err := scenarios.FromResult(r, t.sc, t.bugs())
	if err != nil {
		return nil, err
	}
	s.Name = fmt.Sprintf("seed-%d", t.seed)
	data, err := s.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(out.Scenario, data, 0o644); err != nil {
		return nil, err
	}
	if len(r.Violations) > 0 {
		// A fixed name, so CI can point at it; written there at once, so
		// its header's replay line names the file that exists.
		m, err := a.minimize(t.c, t, r, dir, "minimized.yaml")
		if err != nil {
			a.log.Warn("could not minimize the failing run", "seed", t.seed, "err", err)
		} else {
			out.Minimized = m
			rep.Minimized = m
		}
	}
	info := report.Info{Bugs: t.c.bugNames, Backend: t.c.backend, Reproduce: rep.Reproduce}
	if err := writeHTMLFile(out.HTML, r, info); err != nil {
		return nil, err
	}
	f, err := os.Create(out.Report)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := writeJSON(f, rep); err != nil {
		return nil, err
	}
	return out, nil
}

// sweepArtifacts re-runs the lowest failing seeds of a sweep (on the
// in-memory store when the sweep ran on it, else on the sweep's backend)
// and writes their artifacts under dir/seed-N.
func (a *app) sweepArtifacts(c *common, dir string, rep *sweepReport) {
	for i := range rep.FailingSeeds {
		if i == maxArtifactSeeds {
			a.log.Info("artifacts written for the lowest failing seeds only", "seeds", maxArtifactSeeds)
			break
		}
		if a.ctx.Err() != nil {
			return
		}
		f := &rep.FailingSeeds[i]
		t := &runTarget{a: a, c: c, seed: f.Seed}
		r, err := t.run()
		if err != nil {
			a.log.Warn("could not re-run a failing seed for its artifacts", "seed", f.Seed, "err", err)
			continue
		}
		rr := buildRunReport(c, r)
		rr.Reproduce = c.reproduce(f.Seed)
		art, err := a.writeRunArtifacts(filepath.Join(dir, fmt.Sprintf("seed-%d", f.Seed)), t, r, &rr)
		if err != nil {
			a.log.Warn("could not write a failing seed's artifacts", "seed", f.Seed, "err", err)
			continue
		}
		f.Artifacts = art.Dir
	}
}
