package main

import (
	"bufio"
	_ "embed"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// JUnit XML as CI systems read it (Jenkins, GitLab, GitHub test reporters):
// <testsuites><testsuite><testcase> with <failure> for a violated check,
// <error> for a check that could not run and <skipped> for one that was not
// judged. Every --junit of every command writes these types.
type xunitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr,omitempty"`
	Suites   []xunitSuite `xml:"testsuite"`
}

type xunitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr,omitempty"`
	Time     string      `xml:"time,attr"`
	Cases    []xunitCase `xml:"testcase"`
}

type xunitCase struct {
	XMLName   xml.Name      `xml:"testcase"`
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *xunitMessage `xml:"failure,omitempty"`
	Error     *xunitMessage `xml:"error,omitempty"`
	Skipped   *xunitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type xunitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// writeJUnit writes suites to path atomically (a temp file renamed over
// it), so a CI step never reads half a report.
func writeJUnit(path string, s xunitSuites) error {
	for _, su := range s.Suites {
		s.Tests += su.Tests
		s.Failures += su.Failures
		s.Errors += su.Errors
		s.Skipped += su.Skipped
	}
	return writeAtomic(path, func(w io.Writer) error {
		if _, err := io.WriteString(w, xml.Header); err != nil {
			return err
		}
		enc := xml.NewEncoder(w)
		enc.Indent("", "  ")
		if err := enc.Encode(s); err != nil {
			return err
		}
		_, err := io.WriteString(w, "\n")
		return err
	})
}

// suite adds up a suite's counts from its cases.
func suite(name string, took time.Duration, cases []xunitCase) xunitSuite {
	s := xunitSuite{Name: name, Tests: len(cases), Time: seconds(took), Cases: cases}
	for _, c := range cases {
		if c.Failure != nil {
			s.Failures++
		}
		if c.Error != nil {
			s.Errors++
		}
		if c.Skipped != nil {
			s.Skipped++
		}
	}
	if s.Cases == nil {
		s.Cases = []xunitCase{}
	}
	return s
}

// junitSweep streams a sweep's test cases (one per seed) to a temporary
// file as they come, so a long sweep's report costs disk, not memory; finish
// wraps them in their suite and renames the result into place.
type junitSweep struct {
	path   string
	tmp    *os.File
	w      *bufio.Writer
	enc    *xml.Encoder
	start  time.Time
	tests  int
	failed int
	errs   int
	err    error
}

func newJUnitSweep(path string) (*junitSweep, error) {
	if err := refuseSpecialFile(path); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".cases.*")
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(tmp)
	enc := xml.NewEncoder(w)
	enc.Indent("    ", "  ")
	return &junitSweep{path: path, tmp: tmp, w: w, enc: enc, start: time.Now()}, nil
}

func (j *junitSweep) add(c *common, o *seedOutcome) {
	tc := xunitCase{Classname: "deliverysim.sweep", Name: fmt.Sprintf("seed %d", o.seed), Time: "0"}
	switch {
	case o.err != nil:
		tc.Error = &xunitMessage{Message: o.err.Error(), Type: "error", Text: "reproduce: " + c.reproduce(o.seed)}
		j.errs++
	case o.nvs > 0:
		tc.Failure = &xunitMessage{Message: o.vs[0].String(), Type: strings.Join(o.invs, ","),
			Text: fmt.Sprintf("%d violations of %s\nreproduce: %s", o.nvs, strings.Join(o.invs, ", "), c.reproduce(o.seed))}
		j.failed++
	}
	j.tests++
	if j.err == nil {
		j.err = j.enc.Encode(tc)
	}
	if j.err == nil {
		_, j.err = j.w.WriteString("\n")
	}
}

func (j *junitSweep) finish(rep sweepReport) error {
	if j.err != nil {
		return j.err
	}
	if err := j.w.Flush(); err != nil {
		return err
	}
	if _, err := j.tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	name := "deliverysim sweep " + rep.Seeds
	if rep.Shard != nil {
		name += fmt.Sprintf(" shard %d/%d", rep.Shard.Index, rep.Shard.Count)
	}
	return writeAtomic(j.path, func(w io.Writer) error {
		fmt.Fprint(w, xml.Header)
		fmt.Fprintf(w, "<testsuites name=%q tests=\"%d\" failures=\"%d\" errors=\"%d\">\n", "deliverysim", j.tests, j.failed, j.errs)
		fmt.Fprintf(w, "  <testsuite name=\"%s\" tests=\"%d\" failures=\"%d\" errors=\"%d\" time=\"%s\">\n",
			xmlAttr(name), j.tests, j.failed, j.errs, seconds(time.Since(j.start)))
		if _, err := io.Copy(w, j.tmp); err != nil {
			return err
		}
		_, err := fmt.Fprint(w, "  </testsuite>\n</testsuites>\n")
		return err
	})
}

func (j *junitSweep) abort() {
	j.tmp.Close()
	os.Remove(j.tmp.Name())
}

func xmlAttr(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return strings.ReplaceAll(b.String(), `"`, "&#34;")
}

// GitHub Actions annotations: when GITHUB_ACTIONS=true, each failure is
// also printed as a workflow command (::error ...), which GitHub shows on
// the run's summary and, with a file, beside that file. They go to stderr,
// which the runner reads as it reads stdout, so --json stays pure JSON.
func (a *app) annotating() bool { return a.getenv("GITHUB_ACTIONS") == "true" }

type annotation struct {
	file  string
	line  int
	title string
	msg   string
}

func (a *app) annotate(an annotation) {
	if !a.annotating() {
		return
	}
	var props []string
	if an.file != "" {
		props = append(props, "file="+ghProp(an.file))
		if an.line > 0 {
			props = append(props, fmt.Sprintf("line=%d", an.line))
		}
	}
	if an.title != "" {
		props = append(props, "title="+ghProp(an.title))
	}
	cmd := "::error"
	if len(props) > 0 {
		cmd += " " + strings.Join(props, ",")
	}
	fmt.Fprintf(a.stderr, "%s::%s\n", cmd, ghData(an.msg))
}

func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghProp(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// maxAnnotations: GitHub shows at most ten error annotations per step.
const maxAnnotations = 10

func (a *app) annotateSweep(rep sweepReport) {
	for i, f := range rep.FailingSeeds {
		if i == maxAnnotations {
			break
		}
		an := annotation{title: fmt.Sprintf("deliverysim: seed %d violates %s", f.Seed, strings.Join(f.Invariants, ", ")),
			msg: f.First + "\nreproduce: " + f.Reproduce}
		if f.Artifacts != "" {
			an.file = filepath.Join(f.Artifacts, "minimized.yaml")
		}
		a.annotate(an)
	}
	for i, e := range rep.Errors {
		if i == maxAnnotations {
			break
		}
		a.annotate(annotation{title: fmt.Sprintf("deliverysim: seed %d could not run", e.Seed), msg: e.Error})
	}
}

// jsonDoc is json.md: what every --json field means (deliverysim help json).
//
//go:embed json.md
var jsonDoc string
