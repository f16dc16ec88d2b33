package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/mutate/schema"
)

// Statuses of a mutant in the kill matrix.
const (
	Killed        = "killed"
	KilledTimeout = "killed-by-timeout" // a hang: the harness's own time bound fails the run
	Survived      = "survived"
	Equivalent    = "equivalent" // survived, and the survivors file explains why it cannot be killed
	Invalid       = "invalid"    // does not compile; not run, not counted
)

// Options configure one mutation analysis.
type Options struct {
	Root      string   // module root
	Pkgs      []string // package directories relative to Root
	Seeds     int      // blind-sweep seed budget per mutant
	FirstSeed uint64
	// Pool, if above zero, makes the budget coverage-selected: a mutant
	// runs the first Seeds seeds of FirstSeed..FirstSeed+Pool-1 that run its
	// site in the unmutated build (a seed that never runs the site cannot
	// tell the mutant from the original). Zero runs FirstSeed.. in order.
	Pool     int
	Parallel int // mutants run at once
	// Stall: a step that reports no progress (a seed, a scenario, a suite
	// test) for this long is hung; default 30 s. Each step is also bounded
	// in all by 8x the unmutated run (at least 60 s).
	Stall     time.Duration
	Sample    int               // 1 = every mutant; N = the ones Sampled(id, N) keeps
	Only      func(Mutant) bool // nil = every mutant
	Survivors *Survivors
	Progress  io.Writer // one line per mutant and per phase; nil = quiet
	// NoUnitTests turns off the last step, the mutated package's own unit
	// tests (unittests.go): the kill rate is then the harness's alone.
	NoUnitTests bool
}

// StorePackage reports whether a package is a store backend, whose mutants
// also face the conformance suite on the in-memory backend.
func StorePackage(pkg string) bool { return pkg == "impl/memstore" }

// Outcome is one row of the kill matrix.
type Outcome struct {
	Mutant
	Status      string `json:"status"`
	By          string `json:"by,omitempty"`    // sweep, sweep-error, determinism, scenario, known-bugs, conformance, panic, timeout, unit-tests
	Check       string `json:"check,omitempty"` // the invariant, scenario, suite test or unit test that failed
	Seed        uint64 `json:"seed,omitempty"`
	SeedsToKill int    `json:"seeds_to_kill,omitempty"`
	Detail      string `json:"detail,omitempty"`
	Reached     bool   `json:"reached"` // the site ran under the harness
	// SeedsRun is how many blind seeds the mutant faced: with a pool, the
	// pool's seeds that run its site, up to the budget.
	SeedsRun int     `json:"seeds_run"`
	Seconds  float64 `json:"seconds"`
	Note     string  `json:"note,omitempty"` // from the survivors file
}

// Report is the whole analysis.
type Report struct {
	Packages   []string           `json:"packages"`
	Operators  []string           `json:"operators"`
	Seeds      int                `json:"seeds"`
	Pool       int                `json:"seed_pool,omitempty"` // the budget's seeds are chosen from this many by coverage of the site
	Sample     int                `json:"sample"`              // 1 = every mutant was run
	FirstSeed  uint64             `json:"first_seed"`
	Timeout    float64            `json:"timeout_seconds"`
	KillRate   float64            `json:"kill_rate"`
	Totals     Totals             `json:"totals"`
	PerPackage map[string]*Totals `json:"per_package"`
	Mutants    []Outcome          `json:"mutants"`
	Seconds    float64            `json:"wall_seconds"`
	Stale      []string           `json:"stale_survivor_entries,omitempty"` // listed in the survivors file but killed
	// UnitTests: the packages whose own unit tests ran as the last step;
	// UnitTestsSkipped: the others, and why.
	UnitTests        []string          `json:"unit_test_packages,omitempty"`
	UnitTestsSkipped map[string]string `json:"unit_tests_skipped,omitempty"`
	// Interrupted: the context was cancelled (SIGINT); Mutants holds only
	// the mutants that finished before.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Totals count one package (or all).
type Totals struct {
	Mutants       int `json:"mutants"`
	Killed        int `json:"killed"`         // including by timeout
	KilledTimeout int `json:"killed_timeout"` // part of Killed
	// KilledUnitTests: part of Killed, by the package's own unit tests
	// only (the seeds, scenarios and suite let them through).
	KilledUnitTests int     `json:"killed_unit_tests"`
	Survived        int     `json:"survived"`
	Equivalent      int     `json:"equivalent"`
	Invalid         int     `json:"invalid"`
	KillRate        float64 `json:"kill_rate"` // Killed / (Mutants - Invalid - Equivalent)
}

func (t *Totals) add(o Outcome) {
	t.Mutants++
	if (o.Status == Killed || o.Status == KilledTimeout) && o.By == UnitTestsBy {
		t.KilledUnitTests++
	}
	switch o.Status {
	case Killed:
		t.Killed++
	case KilledTimeout:
		t.Killed++
		t.KilledTimeout++
	case Survived:
		t.Survived++
	case Equivalent:
		t.Equivalent++
	case Invalid:
		t.Invalid++
	}
}

func (t *Totals) finish() {
	if n := t.Mutants - t.Invalid - t.Equivalent; n > 0 {
		t.KillRate = float64(t.Killed) / float64(n)
	}
}

// List generates the mutants of every package, in package order.
func List(root string, pkgs []string) ([]Mutant, error) {
	var all []Mutant
	for _, p := range pkgs {
		ms, err := Generate(GenerateOptions{Root: root, Pkg: p})
		if err != nil {
			return nil, err
		}
		all = append(all, ms...)
	}
	return all, nil
}

// Run generates, builds and runs every mutant and returns the kill matrix.
func Run(ctx context.Context, opts Options) (*Report, error) {
	start := time.Now()
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, err
	}
	opts.Root = root // the overlay's paths must be absolute
	if opts.Parallel < 1 {
		opts.Parallel = 1
	}
	logf := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "mutate: "+format+"\n", args...)
		}
	}
	all, err := List(opts.Root, opts.Pkgs)
	if err != nil {
		return nil, err
	}
	var ms []Mutant
	for _, m := range all {
		if opts.Only == nil || opts.Only(m) {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("no mutant matches --only")
	}
	logf("%d mutants in %s", len(ms), strings.Join(opts.Pkgs, ","))
	opts.Survivors.Anchor(all)

	dir, err := os.MkdirTemp("", "deliverysim-mutate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b := &builds{root: opts.Root, dir: dir}
	logf("building the schemata binary (every mutant guarded, one build)")
	if err := b.schemata(ctx, ms); err != nil {
		return nil, err
	}
	needSuite := false
	for _, p := range opts.Pkgs {
		needSuite = needSuite || StorePackage(p)
	}
	if needSuite {
		logf("building the conformance test binary")
		if err := b.suite(ctx); err != nil {
			return nil, err
		}
	}
	unitSkipped := map[string]string{}
	if opts.NoUnitTests {
		for _, p := range opts.Pkgs {
			unitSkipped[p] = "the unit-test step is off"
		}
	} else {
		logf("building the packages' unit test binaries (same overlay)")
		if unitSkipped, err = b.unitTests(ctx, opts.Pkgs); err != nil {
			return nil, err
		}
		for _, p := range opts.Pkgs {
			if why := unitSkipped[p]; why != "" {
				logf("no unit-test step for %s: %s", p, why)
			}
		}
	}

	// The unmutated baseline must pass every step, or every mutant would
	// look killed.
	r := &runner{opts: opts, b: b, stall: opts.Stall}
	if r.stall <= 0 {
		r.stall = 30 * time.Second
	}
	logf("baseline: sweep of %d seeds and the scenarios, unmutated", opts.Seeds)
	t0 := time.Now()
	base := r.probe(ctx, -1, time.Hour)
	if base.Status != Survived {
		return nil, fmt.Errorf("the unmutated build fails the harness (%s %s: %s); fix that before measuring mutants", base.By, base.Check, base.Detail)
	}
	probeBase := time.Since(t0)
	if needSuite {
		t0 = time.Now()
		if o := r.suite(ctx, -1, time.Hour); o.Status != Survived {
			return nil, fmt.Errorf("the unmutated memstore fails the conformance suite (%s: %s)", o.Check, o.Detail)
		}
		r.suiteTimeout = max(60*time.Second, 8*time.Since(t0))
		// The suite prints a line per test, and one test (the state
		// machine) can run long: allow it twice the whole suite's time.
		r.suiteStall = max(r.stall, 2*time.Since(t0))
	}
	r.probeTimeout = max(60*time.Second, 8*probeBase)
	if len(b.unit) > 0 {
		t0 = time.Now()
		if err := r.unitBaseline(ctx); err != nil {
			return nil, err
		}
		logf("unit tests clean unmutated in %s", time.Since(t0).Round(time.Millisecond))
	}
	logf("baseline clean in %s; a step is hung after %s without progress or %s in all", probeBase.Round(time.Millisecond), r.stall, r.probeTimeout)
	if opts.Pool > 0 {
		logf("coverage: which of seeds %d..%d run each mutant's site (unmutated)", max(1, opts.FirstSeed), max(1, opts.FirstSeed)+uint64(opts.Pool)-1)
		t0 = time.Now()
		cov, err := r.cover(ctx, len(ms))
		if err != nil {
			return nil, err
		}
		r.cov = cov
		logf("coverage of %d seeds in %s: %d of %d sites run by at least one", opts.Pool, time.Since(t0).Round(time.Second), len(cov), len(ms))
	}

	outs := make([]Outcome, len(ms))
	var mu sync.Mutex
	done := 0
	killed := 0
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < opts.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := r.one(ctx, ms[i], i)
				mu.Lock()
				outs[i] = o
				done++
				if o.Status == Killed || o.Status == KilledTimeout {
					killed++
				}
				logf("[%d/%d] %-17s %s %s", done, len(ms), o.Status, o.ID, strings.TrimSpace(o.By+" "+o.Check))
				mu.Unlock()
			}
		}()
	}
	for i := range ms {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	interrupted := ctx.Err() != nil
	if interrupted {
		// Keep what finished: a mutant stopped midway was neither killed
		// nor survived. (Its probe's error is the cancellation.)
		var kept []Outcome
		for _, o := range outs {
			if o.Status != "" {
				kept = append(kept, o)
			}
		}
		outs = kept
	}
	rep := &Report{Packages: opts.Pkgs, Operators: Operators(), Seeds: opts.Seeds, Pool: max(0, opts.Pool), FirstSeed: opts.FirstSeed,
		Sample: max(1, opts.Sample), Timeout: r.stall.Seconds(), PerPackage: map[string]*Totals{}, Mutants: outs, Interrupted: interrupted}
	for _, p := range opts.Pkgs {
		if b.unit[p] != nil {
			rep.UnitTests = append(rep.UnitTests, p)
		}
	}
	if len(unitSkipped) > 0 {
		rep.UnitTestsSkipped = unitSkipped
	}
	for _, p := range opts.Pkgs {
		rep.PerPackage[p] = &Totals{}
	}
	for i := range rep.Mutants {
		o := &rep.Mutants[i]
		if o.Status == Survived && opts.Survivors != nil {
			if e := opts.Survivors.Find(o.Mutant); e != nil {
				o.Note = e.Why
				if e.Status == Equivalent {
					o.Status = Equivalent
				}
			}
		}
		if (o.Status == Killed || o.Status == KilledTimeout) && opts.Survivors != nil {
			// An open entry whose mutant is now killed is stale too: the
			// gap it describes is closed.
			if e := opts.Survivors.Find(o.Mutant); e != nil {
				rep.Stale = append(rep.Stale, fmt.Sprintf("%s: listed as %s but killed by %s", o.ID, e.Status, strings.TrimSpace(o.By+" "+o.Check)))
			}
		}
		rep.Totals.add(*o)
		rep.PerPackage[o.Package].add(*o)
	}
	rep.Totals.finish()
	for _, t := range rep.PerPackage {
		t.finish()
	}
	rep.KillRate = rep.Totals.KillRate
	rep.Seconds = time.Since(start).Seconds()
	if interrupted {
		return rep, ctx.Err()
	}
	return rep, nil
}

// builds holds the binaries of one analysis.
type builds struct {
	root, dir string
	overlay   string              // the schemata overlay
	bin       string              // deliverysim with every mutant guarded
	suiteBin  string              // the conformance tests, same overlay
	unit      map[string]*unitBin // each mutated package's own tests, same overlay (unittests.go)
}

func (b *builds) schemata(ctx context.Context, ms []Mutant) error {
	modPath, err := modulePath(b.root)
	if err != nil {
		return err
	}
	byFile := map[string][]int{}
	var files []string
	for i, m := range ms {
		if m.Invalid != "" || len(m.wraps) == 0 {
			continue
		}
		if _, ok := byFile[m.File]; !ok {
			files = append(files, m.File)
		}
		byFile[m.File] = append(byFile[m.File], i)
	}
	sort.Strings(files)
	replace := map[string]string{}
	for n, f := range files {
		path := filepath.Join(b.root, filepath.FromSlash(f))
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		af, err := parser.ParseFile(token.NewFileSet(), path, src, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		nameEnd := int(af.Name.End()) - 1 // a fresh file set's first file starts at 1
		var sel []Mutant
		var ks []int
		for _, i := range byFile[f] {
			sel = append(sel, ms[i])
			ks = append(ks, i)
		}
		out := filepath.Join(b.dir, fmt.Sprintf("guarded%d_%s", n, filepath.Base(f)))
		if err := os.WriteFile(out, Guard(src, nameEnd, modPath, sel, ks), 0o644); err != nil {
			return err
		}
		replace[path] = out
	}
	ov, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return err
	}
	b.overlay = filepath.Join(b.dir, "overlay.json")
	if err := os.WriteFile(b.overlay, ov, 0o644); err != nil {
		return err
	}
	b.bin = filepath.Join(b.dir, "deliverysim")
	return b.goCmd(ctx, "build", "-overlay", b.overlay, "-o", b.bin, "./cmd/deliverysim")
}

func (b *builds) suite(ctx context.Context) error {
	b.suiteBin = filepath.Join(b.dir, "conformance.test")
	return b.goCmd(ctx, "test", "-c", "-overlay", b.overlay, "-o", b.suiteBin, "./conformance")
}

func (b *builds) goCmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	// go build runs compilers and linkers of its own: on cancellation the
	// whole group goes, or they outlive an interrupted analysis.
	ownGroup(cmd)
	// go's own work folder goes inside the analysis' folder, which is
	// removed however the analysis ends: an interrupted go build leaves
	// its work folder behind.
	cmd.Env = append(os.Environ(), "GOTMPDIR="+b.dir)
	cmd.Dir = b.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s(guarded sources kept in %s only while running; rerun with --only to narrow it down)",
			args[0], err, tail(out.String(), 20), b.dir)
	}
	return nil
}

type runner struct {
	opts         Options
	b            *builds
	probeTimeout time.Duration
	suiteTimeout time.Duration
	stall        time.Duration
	suiteStall   time.Duration
	cov          map[int][]uint64 // with a pool: the seeds that run each site
}

// watch runs cmd, which must print a line on progress (its stderr, or
// stdout for the suite's -test.v), killing it after r.stall without one
// or limit in all. hung reports a kill for either reason.
func (r *runner) watch(ctx context.Context, cmd *exec.Cmd, progress *bytes.Buffer, stall, limit time.Duration) (hung bool, err error) {
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if cmd.Stdout == nil {
		cmd.Stdout = pw
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	lines := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				progress.Write(buf[:n])
				if bytes.IndexByte(buf[:n], '\n') >= 0 {
					select {
					case lines <- struct{}{}:
					default:
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	total := time.NewTimer(limit)
	defer total.Stop()
	quiet := time.NewTimer(stall)
	defer quiet.Stop()
	for {
		select {
		case err := <-done:
			return false, err
		case <-lines:
			quiet.Reset(stall)
		case <-quiet.C:
			killTree(cmd)
			<-done
			return true, nil
		case <-total.C:
			killTree(cmd)
			<-done
			return true, nil
		case <-ctx.Done():
			killTree(cmd)
			<-done
			return false, ctx.Err()
		}
	}
}

// one runs the harness against mutant number k.
func (r *runner) one(ctx context.Context, m Mutant, k int) Outcome {
	start := time.Now()
	if m.Invalid != "" {
		return Outcome{Mutant: m, Status: Invalid, Detail: m.Invalid}
	}
	o := r.probe(ctx, k, r.probeTimeout)
	if o.Status == Survived && StorePackage(m.Package) {
		s := r.suite(ctx, k, r.suiteTimeout)
		s.Reached, s.SeedsRun = s.Reached || o.Reached, o.SeedsRun
		o = s
	}
	// Last, and only for a mutant nothing above killed: the package's own
	// unit tests.
	if u := r.b.unit[m.Package]; o.Status == Survived && u != nil && ctx.Err() == nil {
		t := r.unit(ctx, u, k)
		t.Reached, t.SeedsRun = o.Reached, o.SeedsRun
		o = t
	}
	if ctx.Err() != nil {
		// Cut short by the cancellation: no verdict (Run leaves it out).
		return Outcome{Mutant: m}
	}
	o.Mutant = m
	o.Seconds = time.Since(start).Seconds()
	return o
}

func (r *runner) env(k int) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, schema.EnvVar+"=") {
			env = append(env, e)
		}
	}
	if k >= 0 {
		env = append(env, schema.EnvVar+"="+strconv.Itoa(k))
	}
	return env
}

// probe runs the blind sweep and the scenarios in the guarded binary.
func (r *runner) probe(ctx context.Context, k int, limit time.Duration) Outcome {
	args := []string{"mutate", "--probe", "--seeds", strconv.Itoa(r.opts.Seeds),
		"--first-seed", strconv.FormatUint(max(1, r.opts.FirstSeed), 10)}
	seedsRun := r.opts.Seeds
	if r.cov != nil && k >= 0 {
		list := "none" // no pool seed runs the site: scenarios only
		if seeds := r.cov[k]; len(seeds) > 0 {
			strs := make([]string, len(seeds))
			for i, s := range seeds {
				strs[i] = strconv.FormatUint(s, 10)
			}
			list = strings.Join(strs, ",")
		}
		args = append(args, "--seed-list", list)
		seedsRun = len(r.cov[k])
	}
	cmd := exec.Command(r.b.bin, args...)
	cmd.Env = r.env(k)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	hung, err := r.watch(ctx, cmd, &stderr, r.stall, limit)
	if hung {
		return Outcome{Status: KilledTimeout, By: "timeout", Detail: fmt.Sprintf("no seed or scenario finished for %s (or all took over %s)", r.stall, limit)}
	}
	var p ProbeResult
	if jerr := json.Unmarshal(stdout.Bytes(), &p); err != nil || jerr != nil {
		// The process died: a panic (or a fatal runtime error) is a
		// failure any sweep shows.
		return Outcome{Status: Killed, By: "panic", Detail: oneLine(firstPanic(stderr.String()))}
	}
	o := Outcome{Status: Survived, Reached: p.Reached, SeedsRun: seedsRun}
	if p.Killed {
		o.Status, o.By, o.Check, o.Seed, o.SeedsToKill, o.Detail = Killed, p.By, p.Check, p.Seed, p.SeedsToKill, p.Detail
	}
	return o
}

// cover runs the coverage pass over the pool, split into opts.Parallel
// contiguous parts run side by side, and merges what each part saw.
func (r *runner) cover(ctx context.Context, sites int) (map[int][]uint64, error) {
	first := max(1, r.opts.FirstSeed)
	parts := max(1, min(r.opts.Parallel, r.opts.Pool))
	results := make([]CoverResult, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		lo := p * r.opts.Pool / parts
		hi := (p + 1) * r.opts.Pool / parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(r.b.bin, "mutate", "--cover", "--first-seed", strconv.FormatUint(first+uint64(lo), 10),
				"--seeds", strconv.Itoa(hi-lo), "--budget", strconv.Itoa(r.opts.Seeds))
			cmd.Env = append(r.env(-1), schema.CoverEnvVar+"="+strconv.Itoa(sites))
			var stdout, stderr bytes.Buffer
			cmd.Stdout = &stdout
			hung, err := r.watch(ctx, cmd, &stderr, r.stall, time.Hour)
			switch {
			case hung:
				errs[p] = fmt.Errorf("coverage pass: no seed of %d..%d finished for %s", first+uint64(lo), first+uint64(hi)-1, r.stall)
			case err != nil:
				errs[p] = fmt.Errorf("coverage pass of seeds %d..%d: %v\n%s", first+uint64(lo), first+uint64(hi)-1, err, tail(stderr.String(), 10))
			default:
				errs[p] = json.Unmarshal(stdout.Bytes(), &results[p])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cov := map[int][]uint64{}
	for _, res := range results { // parts in seed order
		if res.Failed != "" {
			return nil, fmt.Errorf("the unmutated build fails a seed of the pool (%s); fix that, or pick a clean pool with --first-seed and --pool", res.Failed)
		}
		for k, seeds := range res.Sites {
			for _, s := range seeds {
				if len(cov[k]) < r.opts.Seeds {
					cov[k] = append(cov[k], s)
				}
			}
		}
	}
	return cov, nil
}

var failLine = regexp.MustCompile(`--- FAIL: (\S+)`)

// suite runs the conformance suite on memstore in the guarded test binary.
func (r *runner) suite(ctx context.Context, k int, limit time.Duration) Outcome {
	cmd := exec.Command(r.b.suiteBin, "-test.run", "^TestMemoryConformance$", "-test.count=1", "-test.v",
		"-rapid.nofailfile")
	cmd.Dir = filepath.Join(r.b.root, "conformance")
	cmd.Env = r.env(k)
	var out bytes.Buffer
	stall := r.suiteStall
	if stall <= 0 {
		stall = limit // the baseline run
	}
	hung, err := r.watch(ctx, cmd, &out, stall, limit)
	if hung {
		return Outcome{Status: KilledTimeout, By: "timeout", Detail: fmt.Sprintf("the conformance suite made no progress for %s (or took over %s)", r.stall, limit)}
	}
	if err == nil {
		return Outcome{Status: Survived}
	}
	o := Outcome{Status: Killed, By: "conformance"}
	var fails []string
	for _, m := range failLine.FindAllStringSubmatch(out.String(), -1) {
		fails = append(fails, m[1])
	}
	// The deepest failing test names the check.
	sort.Slice(fails, func(i, j int) bool { return len(fails[i]) > len(fails[j]) })
	if len(fails) > 0 {
		o.Check = fails[0]
	} else {
		o.By, o.Detail = "panic", oneLine(firstPanic(out.String()))
	}
	return o
}

// Sampled keeps about one mutant in n, chosen by a hash of its id.
func Sampled(id string, n int) bool {
	if n <= 1 {
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()%uint32(n) == 0
}

func firstPanic(s string) string {
	if i := strings.Index(s, "panic: "); i >= 0 {
		s = s[i:]
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n") + "\n"
}
