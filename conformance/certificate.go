package conformance

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CertificateVersion is the schema_version of a Certificate's JSON.
const CertificateVersion = 1

// Certificate is the report of Certify: what `deliverysim certify` and an
// implementer's Main print, as text or (--json) as this document.
type Certificate struct {
	SchemaVersion int    `json:"schema_version"`
	Backend       string `json:"backend"`
	// DSN is where the stores ran, password removed; "" for a backend
	// without one (in memory).
	DSN    string `json:"dsn"`
	Passed bool   `json:"passed"` // at least one check ran, none failed, and the run was not interrupted
	// Interrupted: the run was stopped (SIGINT, SIGTERM, Context) before
	// every check had its verdict; the results say which ran (pass, fail),
	// which was cut short (interrupted) and which never started (not_run).
	Interrupted bool `json:"interrupted"`
	// ArtifactsDir is where a failing check writes its files (a
	// non-linearizable history as HTML): --artifacts, else
	// DefaultArtifactsDir. It exists only if a check wrote there.
	ArtifactsDir string `json:"artifacts_dir"`
	// ChecksRun counts the checks that ran (passed or failed) over every
	// run; a certificate with none never passes.
	ChecksRun int `json:"checks_run"`
	// Seed drove the concurrent clients' calls and delays; rerun with it
	// (--seed, conformance.Seed) to draw the same calls again.
	Seed       uint64      `json:"seed"`
	Runs       []Session   `json:"runs"`
	Guarantees []Guarantee `json:"guarantees"`
	Results    []Result    `json:"results"`
}

// Session is one configuration the backend was certified under (one Factory).
type Session struct {
	Variant   string  `json:"variant"`          // Factory.Variant ("" for the only one)
	Server    *Server `json:"server,omitempty"` // Factory.Describe's answer
	ChecksRun int     `json:"checks_run"`
	Failed    int     `json:"failed"`
	Skipped   int     `json:"skipped"`
}

// Guarantee is one group of the suite, as an operator reads it.
type Guarantee struct {
	Group   string `json:"group"`
	Meaning string `json:"meaning"`
	Status  string `json:"status"` // pass, fail, skip, interrupted (none failed, some did not finish)
	Checks  int    `json:"checks"`
	Failed  int    `json:"failed"`
}

var guaranteeMeaning = map[string]string{
	GroupContract:        "every store call does what the contract says, call by call",
	GroupStateMachine:    "random call sequences match the reference model's state",
	GroupLinearizability: "concurrent calls behave as if one at a time (porcupine)",
}

// describeTimeout bounds Factory.Describe: it is a preflight, and a
// black-holed server must not hang the command.
const describeTimeout = 30 * time.Second

// Certify runs Check on every factory (one per configuration of the same
// backend) and gathers the results in one Certificate. It returns an error,
// and runs nothing, when the options select no known check or a factory's
// Describe fails. Without a Seed option it draws one and records it.
func Certify(factories []Factory, opts ...Option) (Certificate, error) {
	if len(factories) == 0 {
		return Certificate{}, errors.New("conformance: Certify needs at least one Factory")
	}
	s := newSettings(opts)
	if err := ValidateOnly(s.only); err != nil {
		return Certificate{}, err
	}
	// One seed and one artifacts folder for every run, so the report's
	// seed redraws them all and their files are found in one place.
	opts = append(append([]Option(nil), opts...), Seed(s.seed), ArtifactsDir(s.artifacts))
	cert := Certificate{SchemaVersion: CertificateVersion, Backend: factories[0].Name, Seed: s.seed, ArtifactsDir: s.artifacts}
	servers := make([]*Server, len(factories))
	for i, f := range factories {
		if err := validate(f); err != nil {
			return Certificate{}, err
		}
		if f.Describe == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, describeTimeout)
		srv, err := f.Describe(ctx)
		cancel()
		if err != nil && s.ctx.Err() != nil {
			// Stopped, not unreachable: the checks below are reported
			// not run.
			continue
		}
		if err != nil {
			return Certificate{}, fmt.Errorf("%s: %w", variantName(f), err)
		}
		servers[i] = &srv
	}
	for i, f := range factories {
		rep := Check(f, opts...)
		run := Session{Variant: f.Variant, Server: servers[i]}
		for _, r := range rep.Results {
			switch r.Status {
			case Pass:
				run.ChecksRun++
			case Fail:
				run.ChecksRun++
				run.Failed++
			case Skip:
				run.Skipped++
			case Interrupted, NotRun:
				cert.Interrupted = true
			}
		}
		cert.Runs = append(cert.Runs, run)
		cert.ChecksRun += run.ChecksRun
		cert.Results = append(cert.Results, rep.Results...)
	}
	cert.Guarantees = guarantees(cert.Results)
	cert.Passed = cert.ChecksRun > 0 && len(cert.Failures()) == 0 && !cert.Interrupted
	return cert, nil
}

func variantName(f Factory) string {
	if f.Variant == "" {
		return f.Name
	}
	return f.Name + " (" + f.Variant + ")"
}

func guarantees(results []Result) []Guarantee {
	var out []Guarantee
	for _, g := range []string{GroupContract, GroupStateMachine, GroupLinearizability} {
		gr := Guarantee{Group: g, Meaning: guaranteeMeaning[g], Status: "skip"}
		ran, stopped := 0, 0
		for _, r := range results {
			if r.Group != g {
				continue
			}
			gr.Checks++
			switch r.Status {
			case Fail:
				gr.Failed++
				ran++
			case Pass:
				ran++
			case Interrupted, NotRun:
				stopped++
			}
		}
		switch {
		case gr.Failed > 0:
			gr.Status = "fail"
		case stopped > 0:
			gr.Status = "interrupted"
		case ran > 0:
			gr.Status = "pass"
		}
		out = append(out, gr)
	}
	return out
}

// Failures returns the failed checks of every run.
func (c Certificate) Failures() []Result {
	var out []Result
	for _, r := range c.Results {
		if r.Status == Fail {
			out = append(out, r)
		}
	}
	return out
}

// ExitInterrupted is the status of a run stopped by a signal, as every
// deliverysim command reports it (128 + SIGINT, what a shell shows).
const ExitInterrupted = 130

// ExitCode is the process status a command reports for c: 0 certified, 1
// not (a check failed, or none ran), ExitInterrupted when it was stopped
// before every check had its verdict.
func (c Certificate) ExitCode() int {
	switch {
	case c.Interrupted:
		return ExitInterrupted
	case c.Passed:
		return 0
	}
	return 1
}

// WriteJSON writes c as indented JSON.
func (c Certificate) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// WriteText writes the human report: where, the runs and their servers,
// one line per guarantee, one per check (failures with their story), and
// the verdict.
func (c Certificate) WriteText(w io.Writer) error {
	var b strings.Builder
	where := ""
	if c.DSN != "" {
		where = " on " + c.DSN
	}
	fmt.Fprintf(&b, "certifying %s%s (seed %d)\n", c.Backend, where, c.Seed)
	for _, r := range c.Runs {
		if r.Server == nil {
			continue
		}
		fmt.Fprintf(&b, "  %s: server %s, session time zone %s, default isolation %s\n",
			orDefault(r.Variant, c.Backend), r.Server.Version, r.Server.TimeZone, r.Server.DefaultIsolation)
	}
	b.WriteString("\n")
	for _, g := range c.Guarantees {
		fmt.Fprintf(&b, "%-5s %-16s %s (%d checks, %d failed)\n", strings.ToUpper(g.Status), g.Group, g.Meaning, g.Checks, g.Failed)
	}
	if note := raceNote(c.Results); note != "" {
		b.WriteString("\n" + note + "\n")
	}
	for _, r := range c.Runs {
		b.WriteString("\n")
		rep := Report{Backend: c.Backend, Variant: r.Variant}
		for _, res := range c.Results {
			if res.Variant == r.Variant {
				rep.Results = append(rep.Results, res)
			}
		}
		b.WriteString(rep.checks())
	}
	if st, err := os.Stat(c.ArtifactsDir); c.ArtifactsDir != "" && err == nil && st.IsDir() {
		fmt.Fprintf(&b, "artifacts: %s\n", c.ArtifactsDir)
	}
	switch {
	case c.Interrupted:
		stopped := 0
		for _, r := range c.Results {
			if r.Status == Interrupted || r.Status == NotRun {
				stopped++
			}
		}
		fmt.Fprintf(&b, "verdict: INTERRUPTED (%d checks ran, %d failed, %d interrupted or not run: nothing was certified)\n",
			c.ChecksRun, len(c.Failures()), stopped)
	case c.Passed:
		fmt.Fprintf(&b, "verdict: PASS (%d checks ran, none failed)\n", c.ChecksRun)
	case c.ChecksRun == 0:
		b.WriteString("verdict: FAIL (no check ran: nothing was certified)\n")
	default:
		fmt.Fprintf(&b, "verdict: FAIL (%d of %d checks failed; rerun with --seed %d)\n", len(c.Failures()), c.ChecksRun, c.Seed)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// raceNote is the line a report opens its failures with when both
// sequential and concurrent checks failed: a store that is wrong one call
// at a time fails the concurrent checks too, and a reader who starts with
// those hunts a race that is not there.
func raceNote(results []Result) string {
	var seq []string
	lz := false
	for _, r := range results {
		if r.Status != Fail {
			continue
		}
		if r.Group == GroupLinearizability {
			lz = true
		} else if !slices.Contains(seq, r.Name) {
			seq = append(seq, r.Name)
		}
	}
	if !lz || len(seq) == 0 {
		return ""
	}
	return fmt.Sprintf("NOTE: sequential checks failed (%s). They call the store one call at a time, so fix them first; "+
		"the Linearizability failures are most likely the same bug seen from several clients: a race is not the first suspect.", strings.Join(seq, ", "))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The JUnit XML shape CI systems read: one suite per run, one case per check.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes c as JUnit XML to path, atomically (a temporary file
// renamed over it), so that a CI step never reads half a report.
func (c Certificate) WriteJUnit(path string) error {
	doc := junitSuites{Name: "certify " + c.Backend}
	for _, r := range c.Runs {
		su := junitSuite{Name: "certify " + variantName(Factory{Name: c.Backend, Variant: r.Variant})}
		var took time.Duration
		for _, res := range c.Results {
			if res.Variant != r.Variant {
				continue
			}
			tc := junitCase{Classname: "certify." + c.Backend + "." + res.Group, Name: res.Name, Time: fmt.Sprintf("%.3f", res.Duration.Seconds())}
			if res.Variant != "" {
				tc.Name = res.Name + " [" + res.Variant + "]"
			}
			switch res.Status {
			case Fail:
				tc.Failure = &junitMessage{Message: res.Summary, Type: res.Group, Text: res.Message}
				su.Failures++
			case Skip, Interrupted, NotRun:
				tc.Skipped = &junitMessage{Message: res.Summary}
				su.Skipped++
			}
			took += res.Duration
			su.Cases = append(su.Cases, tc)
		}
		su.Tests = len(su.Cases)
		su.Time = fmt.Sprintf("%.3f", took.Seconds())
		doc.Tests += su.Tests
		doc.Failures += su.Failures
		doc.Skipped += su.Skipped
		doc.Suites = append(doc.Suites, su)
	}
	data, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".certify-junit-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append([]byte(xml.Header), append(data, '\n')...)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// StopNote says, for an interrupted certificate, where the run was
// stopped: the check cut short, and how many never started.
func (c Certificate) StopNote() string {
	var at []string
	notRun := 0
	for _, r := range c.Results {
		switch r.Status {
		case Interrupted:
			at = append(at, variantName(Factory{Name: r.Name, Variant: r.Variant}))
		case NotRun:
			notRun++
		}
	}
	note := "stopped between two checks"
	if len(at) > 0 {
		note = "stopped during " + strings.Join(at, ", ")
	}
	return fmt.Sprintf("%s; not run: %d", note, notRun)
}
