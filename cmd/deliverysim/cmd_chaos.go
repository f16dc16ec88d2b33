package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/chaos"
)

// chaosEngineEnv, when set in the environment, is passed on to the engine
// child (tests use it to run their own binary as deliverysim).
const chaosEngineEnv = "DELIVERYSIM_CHAOS_ENGINE_ENV"

// chaosFlags are chaos's command line.
type chaosFlags struct {
	seed                    string
	duration, settle        time.Duration
	outage, killWindow      time.Duration
	kills, cuts, bots, rate int
	botFaults               int
	dsn, engineCmd, bugs    string
	plant                   string
	breaker                 string
	snapshots               string
	retention               string
	handoff, faultKinds     string
	replay                  string
	asJSON, smoke           bool
	eng                     engine.Config
}

func (f *chaosFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.seed, "seed", "", "seed of the fault schedule and workload (default: random, printed)")
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "length of the fault phase (production runs during it)")
	fs.IntVar(&f.kills, "kills", -1, "SIGKILL+restart of the engine during the fault phase (default one per 6s)")
	fs.IntVar(&f.cuts, "db-cuts", -1, "database connection cuts and stalls (default max(3, one per 10s))")
	fs.DurationVar(&f.outage, "db-outage", 0, "add one long database outage of this length, from a third of the way into the fault phase (every connection stalls; store calls fail by their timeout)")
	fs.IntVar(&f.botFaults, "bot-faults", -1, "windows of 5xx, refused, timeout-after-handler, slow or duplicated requests on bots 1.. (default one per 4s)")
	fs.IntVar(&f.bots, "bots", 4, "webhook servers (bot-0 stays healthy; the others get faults)")
	fs.IntVar(&f.rate, "rate", 20, "events produced per second")
	fs.DurationVar(&f.settle, "settle", 60*time.Second, "the liveness bound: the settle after the heal gives up once no obligation has resolved for this long (and after 5 times this in all); it ends as soon as every obligation is resolved")
	fs.DurationVar(&f.killWindow, "kill-window", chaos.DefaultKillWindow, "an answer reaching the engine less than this before a SIGKILL belongs to no attempt it completed (PROTOCOL.md, Kills)")
	fs.StringVar(&f.faultKinds, "faults", "", "limit the plan to these fault kinds, comma-separated (default all): "+kindNames())
	fs.StringVar(&f.replay, "replay", "", "run again the plan and workload of this chaos --json report (its seed, schedule and flags; flags given here win)")
	fs.BoolVar(&f.smoke, "smoke", false, "a quick protocol check instead of a run (seconds; a step fails after 5s without progress): paging, registry, signing, one delivery, one retry, one restart")
	fs.StringVar(&f.dsn, "dsn", "", "Postgres DSN, a postgres:// URL (default $DELIVERYSIM_PG_DSN, else "+defaultDSN+")")
	fs.StringVar(&f.engineCmd, "engine-cmd", "", "engine to certify, split on spaces (no shell); it gets --upstream --registry --listen --dsn --schema --node, and the declared settings as DELIVERYSIM_* environment variables (PROTOCOL.md) (default: deliverysim serve)")
	fs.StringVar(&f.bugs, "bugs", "", "known-bug variants of the reference engine, comma-separated: "+strings.Join(bugNames(), ", "))
	fs.StringVar(&f.breaker, "breaker", "", "declared (the engine has a per-bot circuit breaker with --breaker-failures and --breaker-open-for: breaker-policy is judged) or none (default: declared for the reference engine, none for --engine-cmd)")
	fs.StringVar(&f.snapshots, "snapshots", "", "declared (the engine serves snapshot sources, runtime/PROTOCOL.md \"Snapshot sources\": the workload adds repositories and apps and the snapshot checks are judged) or none (default: declared for the reference engine, none for --engine-cmd)")
	fs.StringVar(&f.retention, "retention", "", "declared (the engine drops messages held for a bot without a key by --retention-ttl and --retention-max, checked every --cleanup-interval, runtime/PROTOCOL.md \"retention-bounds\": the workload's keyless bot collects a backlog past both and retention-bounds is judged) or none (the declared TTL and cap then bind nothing; default: declared for the reference engine, none for --engine-cmd)")
	fs.StringVar(&f.plant, "plant", "", "planted variants of the reference engine that the rules judged with the declared settings must catch, comma-separated: "+chaosPlantNames())
	fs.StringVar(&f.handoff, "handoff", "queued", "reference engine hand-off: queued or direct")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON on stdout")
	// The engine's settings: the reference engine is run with them, and
	// they are the checker's bounds; an engine under certification
	// (--engine-cmd) declares with them how it is configured, and receives
	// them in its environment (settingsEnv).
	registerEngineFlags(fs, &f.eng, chaos.ReferenceEngine())
}

func kindNames() string {
	var ns []string
	for _, k := range chaos.Kinds() {
		ns = append(ns, string(k))
	}
	return strings.Join(ns, ",")
}

// refuseDefaultsInDisguise: chaos.Config fills zero fields with defaults,
// so a zero or negative value typed on the command line would silently
// become the default (--duration -5s ran 30s). Typed values must be real.
func (f *chaosFlags) refuseDefaultsInDisguise() error {
	switch {
	case f.duration <= 0:
		return usagef("chaos: --duration %s: use a positive duration between 1s and 24h", f.duration)
	case f.settle <= 0:
		return usagef("chaos: --settle %s: use a positive duration between 1s and 1h", f.settle)
	case f.bots <= 0:
		return usagef("chaos: --bots %d: use 2 to 64", f.bots)
	case f.rate <= 0:
		return usagef("chaos: --rate %d: use 1 to 2000 events per second", f.rate)
	}
	return nil
}

// countDefaults are chaos's counts and what leaving each out means. Their
// flag default (-1) stands for that, so a negative value typed on the
// command line silently became it (--kills -3 ran the default kills): a
// count that is set must be 0 or more.
var countDefaults = map[string]string{"kills": "one per 6s", "db-cuts": "max(3, one per 10s)", "bot-faults": "one per 4s"}

func refuseNegativeCounts(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if def, ok := countDefaults[f.Name]; ok && err == nil && strings.HasPrefix(f.Value.String(), "-") {
			err = usagef("chaos: --%s %s: use 0 or more (leave it out for the default, %s)", f.Name, f.Value, def)
		}
	})
	return err
}

func parseKinds(s string) ([]faults.Kind, error) {
	if s == "" {
		return nil, nil
	}
	var out []faults.Kind
	for _, n := range strings.Split(s, ",") {
		k := faults.Kind(strings.TrimSpace(n))
		if !slices.Contains(chaos.Kinds(), k) {
			return nil, usagef("chaos: --faults: %q is not a fault chaos carries out; use some of %s", n, kindNames())
		}
		if slices.Contains(out, k) {
			return nil, usagef("chaos: --faults names %q twice; name each kind once", k)
		}
		out = append(out, k)
	}
	return out, nil
}

func (a *app) parseChaos(args []string) (*chaosFlags, *chaos.Report, error) {
	f := &chaosFlags{}
	fs := newFlagSet("chaos", a.stderr)
	f.register(fs)
	if err := a.parse(fs, args); err != nil {
		return nil, nil, err
	}
	if err := f.refuseDefaultsInDisguise(); err != nil {
		return nil, nil, err
	}
	if err := refuseNegativeCounts(fs); err != nil {
		return nil, nil, err
	}
	if f.replay == "" {
		return f, nil, nil
	}
	beside := map[string]bool{} // the flags this command line sets
	fs.Visit(func(fl *flag.Flag) { beside[fl.Name] = true })
	b, err := os.ReadFile(f.replay)
	if err != nil {
		return nil, nil, usagef("chaos: --replay: %v", err)
	}
	var prev chaos.Report
	if err := json.Unmarshal(b, &prev); err != nil || len(prev.Args) == 0 {
		return nil, nil, usagef("chaos: --replay %s: not a chaos --json report with its args (%v)", f.replay, err)
	}
	// The report's flags first, this command line's after them: what is
	// given here wins. The engine is one choice: --engine-cmd given here
	// replaces the report's reference engine (--bugs, --handoff), and
	// --bugs or --handoff given here replace the report's --engine-cmd.
	// A breaker declared for one engine is not the other's (--breaker
	// goes with the engine unless given here).
	prevArgs := prev.Args
	switch {
	case beside["engine-cmd"]:
		prevArgs = withoutFlags(prevArgs, "bugs", "handoff", "plant", "breaker", "snapshots", "retention")
	case beside["bugs"] || beside["handoff"] || beside["plant"]:
		prevArgs = withoutFlags(prevArgs, "engine-cmd", "breaker", "snapshots", "retention")
	case !slices.Contains(prevArgs, "--engine-cmd") && len(prev.Engine) > 1 && prev.Engine[1] != "serve":
		// A report from before the args held the engine: its command
		// line is the one it ran (split on spaces, so joining them
		// gives it back).
		prevArgs = append(slices.Clone(prevArgs), "--engine-cmd", strings.Join(prev.Engine, " "))
	}
	f = &chaosFlags{}
	fs = newFlagSet("chaos", a.stderr)
	f.register(fs)
	if err := a.parseOver(fs, prevArgs, args); err != nil {
		return nil, nil, err
	}
	if err := refuseNegativeCounts(fs); err != nil {
		return nil, nil, err
	}
	return f, &prev, nil
}

// withoutFlags is args (pairs of --name value, as a report's args are)
// without the named flags.
func withoutFlags(args []string, names ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if slices.Contains(names, strings.TrimLeft(args[i], "-")) && i+1 < len(args) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// rerunLine is the printed command that runs the same plan, workload and
// declared settings again: the report's args, in this program's own name
// (selfCommand). The workload's counts and the engine are always written
// out; any other flag only when it is not this binary's default.
func rerunLine(args []string) string {
	always := []string{"seed", "duration", "kills", "db-cuts", "bot-faults", "bots", "rate", "settle", "engine-cmd"}
	fs := newFlagSet("chaos", io.Discard)
	(&chaosFlags{}).register(fs)
	var b strings.Builder
	b.WriteString(selfCommand() + " chaos")
	for i := 0; i+1 < len(args); i += 2 {
		name, v := strings.TrimLeft(args[i], "-"), args[i+1]
		if fl := fs.Lookup(name); fl != nil && !slices.Contains(always, name) && v == fl.DefValue {
			continue
		}
		if strings.ContainsAny(v, " '\"$`\\*?[]{}()<>|&;#~!\t\n") || v == "" {
			v = shellQuote(v)
		}
		b.WriteString(" --" + name + " " + v)
	}
	return b.String()
}

// settingArgs renders every declared setting as chaos's (and serve's)
// flags: the report carries them so a replay declares the same.
func settingArgs(eng engine.Config) []string {
	fs, e := engineFlags()
	*e = eng
	var args []string
	fs.VisitAll(func(f *flag.Flag) { args = append(args, "--"+f.Name, f.Value.String()) })
	return args
}

// settingsEnv is how an engine under certification learns the settings it
// was declared with: DELIVERYSIM_<FLAG> for each, durations as integer
// milliseconds under DELIVERYSIM_<FLAG>_MS (PROTOCOL.md, "Settings").
func settingsEnv(eng engine.Config) []string {
	fs, e := engineFlags()
	*e = eng
	var env []string
	fs.VisitAll(func(f *flag.Flag) {
		name := "DELIVERYSIM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if g, ok := f.Value.(flag.Getter); ok {
			if d, ok := g.Get().(time.Duration); ok {
				env = append(env, fmt.Sprintf("%s_MS=%d", name, d.Milliseconds()))
				return
			}
		}
		env = append(env, name+"="+f.Value.String())
	})
	return env
}

func (a *app) cmdChaos(args []string) (int, error) {
	f, prev, err := a.parseChaos(args)
	if err != nil {
		return 0, err
	}
	seed, duration, settle, outage := f.seed, f.duration, f.settle, f.outage
	kills, cuts, bots, rate, botFaults := f.kills, f.cuts, f.bots, f.rate, f.botFaults
	dsn, engineCmd, bugs, handoff, asJSON, eng := f.dsn, f.engineCmd, f.bugs, f.handoff, f.asJSON, f.eng
	chaosPlantDeclare(f.plant, &eng)
	retention, err := declaredCapability("--retention", f.retention, engineCmd != "")
	if err != nil {
		return 0, err
	}
	if retention == "none" || f.smoke {
		// Nothing may be dropped: the smoke's registry step wants every
		// held event, and an engine without retention keeps them all.
		chaos.NoRetention(&eng)
	}
	if err := validateEngine("chaos", eng); err != nil {
		return 0, err
	}
	kinds, err := parseKinds(f.faultKinds)
	if err != nil {
		return 0, err
	}
	cfg := chaos.Config{Duration: duration, Bots: bots, Rate: rate, Settle: settle, BotFaults: botFaults, Outage: outage, Engine: eng,
		KillWindow: f.killWindow, Faults: kinds, Retention: retention == "declared" && !f.smoke}
	if prev != nil {
		cfg.Schedule = prev.Schedule
		if cfg.Schedule == nil {
			cfg.Schedule = []faults.Fault{}
		}
	}
	if seed == "" {
		cfg.Seed = rand.Uint64() % 1_000_000
	} else {
		v, err := parseSeed("--seed", seed)
		if err != nil {
			return 0, err
		}
		cfg.Seed = v
	}
	cfg.Kills = kills
	if kills < 0 {
		cfg.Kills = int(duration / (6 * time.Second))
	}
	cfg.DBCuts = cuts
	if cuts < 0 {
		cfg.DBCuts = max(3, int(duration/(10*time.Second)))
	}
	if botFaults < 0 {
		botFaults = int(duration / (4 * time.Second)) // chaos.Config.Defaults' rule, written out for the args
	}
	cfg.BotFaults = botFaults
	// Args are every flag that shapes the plan, the workload and the run,
	// with the counts resolved: a report's replay and its printed rerun
	// line give the same plan.
	cfg.Args = append([]string{"--seed", strconv.FormatUint(cfg.Seed, 10), "--duration", duration.String(),
		"--kills", strconv.Itoa(cfg.Kills), "--db-cuts", strconv.Itoa(cfg.DBCuts), "--bot-faults", strconv.Itoa(botFaults),
		"--bots", strconv.Itoa(bots), "--rate", strconv.Itoa(rate), "--settle", settle.String(), "--db-outage", outage.String(),
		"--kill-window", f.killWindow.String(), "--faults", f.faultKinds}, settingArgs(eng)...)
	for _, c := range []struct {
		flag, given string
		on          *bool
	}{{"--breaker", f.breaker, &cfg.Breaker}, {"--snapshots", f.snapshots, &cfg.Snapshots}} {
		v, err := declaredCapability(c.flag, c.given, engineCmd != "")
		if err != nil {
			return 0, err
		}
		*c.on = v == "declared"
		cfg.Args = append(cfg.Args, c.flag, v)
	}
	cfg.Args = append(cfg.Args, "--retention", retention)
	if engineCmd != "" {
		cfg.Args = append(cfg.Args, "--engine-cmd", engineCmd)
	} else {
		cfg.Args = append(cfg.Args, "--handoff", handoff, "--bugs", bugs)
		if f.plant != "" {
			cfg.Args = append(cfg.Args, "--plant", f.plant)
		}
	}
	if dsn == "" {
		dsn = a.getenv("DELIVERYSIM_PG_DSN")
	}
	defaulted := dsn == ""
	if defaulted {
		dsn = defaultDSN
	}
	cfg.DSN = dsn
	if handoff != "queued" && handoff != "direct" {
		return 0, usagef("chaos: --handoff %q: use queued or direct", handoff)
	}
	if _, _, err := parseBugs(bugs); err != nil {
		return 0, err
	}
	if engineCmd != "" {
		if bugs != "" {
			return 0, usagef("chaos: --bugs switches the reference engine's known bugs; it cannot be combined with --engine-cmd")
		}
		if f.plant != "" {
			return 0, usagef("chaos: --plant plants a variant in the reference engine; it cannot be combined with --engine-cmd")
		}
		cfg.EngineCmd = strings.Fields(engineCmd)
	} else {
		exe, err := os.Executable()
		if err != nil {
			return 0, &envError{err: fmt.Errorf("chaos: cannot locate this executable to run `deliverysim serve`: %v; pass --engine-cmd", err)}
		}
		cfg.Reference = true
		planted, err := chaosPlantArgs(f.plant)
		if err != nil {
			return 0, err
		}
		cfg.EngineCmd = append([]string{exe}, overrideFlags(chaosServeArgs(bugs, handoff, eng), planted)...)
	}
	if e := a.getenv(chaosEngineEnv); e != "" {
		cfg.EngineEnv = strings.Fields(e)
	}
	if !cfg.Reference {
		cfg.EngineEnv = append(cfg.EngineEnv, settingsEnv(eng)...)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return 0, usagef("chaos: %v", err)
	}
	if defaulted {
		fmt.Fprintf(a.stderr, "deliverysim: no --dsn and no DELIVERYSIM_PG_DSN; using the local server %s\n", defaultDSN)
	}
	if f.smoke {
		return a.chaosSmoke(cfg, asJSON)
	}
	if !asJSON {
		cfg.Progress = a.stdout
	} else {
		cfg.Progress = a.stderr
	}
	ctx, stop := signal.NotifyContext(a.ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		rep.Rerun = rerunLine(cfg.Args)
	}
	if errors.Is(err, chaos.ErrInterrupted) {
		fmt.Fprintf(a.stderr, "deliverysim: chaos interrupted; the engine was killed and reaped, schema and temp files removed (seed %d)\n", cfg.Seed)
		if asJSON && rep != nil {
			if err := writeVersionedJSON(a.stdout, rep); err != nil {
				return 2, err
			}
		}
		return exitInterrupted, nil
	}
	if err != nil {
		return 0, &envError{err: fmt.Errorf("chaos: %v", err)}
	}
	if asJSON {
		if err := writeVersionedJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		printChaos(a.stdout, rep)
	}
	if rep.Failed() {
		return 1, nil
	}
	return 0, nil
}

// chaosServeArgs is the reference engine's command line under chaos: its
// engine settings are rendered from eng, the configuration the checker
// judges it by, so the two cannot disagree.
// declaredCapability is an optional capability's --flag value: as given,
// else declared for the reference engine and none for an --engine-cmd
// engine (an outsider's engine is not assumed to have what it did not say).
func declaredCapability(flag, given string, foreign bool) (string, error) {
	switch {
	case given == "" && foreign:
		return "none", nil
	case given == "":
		return "declared", nil
	case given == "declared" || given == "none":
		return given, nil
	}
	return "", usagef("chaos: %s %q: use declared or none", flag, given)
}

// overrideFlags is args with each "--flag value" pair of over set in
// place: a plant serves a setting other than the declared one, and serve
// refuses a flag given twice.
func overrideFlags(args, over []string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(over); i += 2 {
		j := slices.Index(out, over[i])
		if j >= 0 && j+1 < len(out) {
			out[j+1] = over[i+1]
			continue
		}
		out = append(out, over[i], over[i+1])
	}
	return out
}

func chaosServeArgs(bugs, handoff string, eng engine.Config) []string {
	args := []string{"serve", "--backend", "postgres", "--max-conns", "4", "--log-format", "json",
		"--store-timeout", "2s", "--poll-wait", "2s", "--drain-timeout", "3s", "--handoff", handoff,
		// Retention ages and caps only the messages held for a bot without
		// a key (the chaos TTL of seconds would cut retry schedules short).
		"--retention-scope", "held"}
	args = append(args, engineArgs(eng)...)
	if bugs != "" {
		args = append(args, "--bugs", bugs)
	}
	return args
}

func printChaos(w io.Writer, r *chaos.Report) {
	fmt.Fprintf(w, "\nchaos seed %d, %s fault phase (%s)\n", r.Seed, r.Duration, r.Note)
	fmt.Fprintf(w, "  produced %d events, %d obligations: delivered %d, dead-lettered %d, retention may have dropped %d, lost %d\n", r.Produced, r.Owed, r.Delivered, r.DeadLetter, r.RetentionMayDrop, r.Lost)
	fmt.Fprintf(w, "  duplicates: %d on the wire (%d injected), %d handler re-runs\n", r.Duplicates.Wire, r.Duplicates.Injected, r.Duplicates.Handler)
	fmt.Fprintf(w, "  survived: %d kills, %d db cuts/stalls, %d bot faults; %d unexpected exits\n", r.Kills, r.DBCuts, r.BotFaults, r.Restarts)
	fmt.Fprintf(w, "  delivery latency (produced to handled): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", r.LatencyMs.P50, r.LatencyMs.P99, r.LatencyMs.Max)
	fmt.Fprintf(w, "  quiescent: %v (in %s); /metrics: %d scrapes, acked %.0f, sent %.0f, store errors %.0f\n", r.Quiescent, r.SettledIn, r.Metrics.Scrapes, r.Metrics.Acked, r.Metrics.Sent, r.Metrics.StoreErrors)
	fmt.Fprintf(w, "  observation endpoint: %s\n", r.Observation)
	for _, v := range r.Verdicts {
		if v.Why != "" {
			fmt.Fprintf(w, "  %-26s %s (%s)\n", v.Invariant, v.Verdict, v.Why)
		} else {
			fmt.Fprintf(w, "  %-26s %s\n", v.Invariant, v.Verdict)
		}
	}
	printCoverage(w, r.Coverage)
	// Losses first: they are what a reader looks for.
	vs := append([]oracle.Violation(nil), r.Violations...)
	sort.SliceStable(vs, func(i, j int) bool {
		return vs[i].Invariant == oracle.InvNoSilentLoss && vs[j].Invariant != oracle.InvNoSilentLoss
	})
	const show = 20
	for i, v := range vs {
		if i == show {
			fmt.Fprintf(w, "  ... and %d more violations (--json lists all)\n", len(r.Violations)-show)
			break
		}
		fmt.Fprintf(w, "  VIOLATION %s\n", v.String())
	}
	fmt.Fprintf(w, "rerun the same plan: %s\n", r.Rerun)
	fmt.Fprintf(w, "or replay the plan, workload, settings and engine of a chaos --json report: %s chaos --replay REPORT.json\n", selfCommand())
	if r.Failed() && len(r.EngineLog) > 0 {
		fmt.Fprintf(w, "engine log (last %d lines):\n", len(r.EngineLog))
		for _, l := range r.EngineLog {
			fmt.Fprintf(w, "  | %s\n", l)
		}
	}
}

// printCoverage: how often the run reached each situation of PROTOCOL.md,
// and why it did not reach the others (a PASS says nothing about those).
func printCoverage(w io.Writer, cs []chaos.Situation) {
	reached := 0
	for _, c := range cs {
		if c.Count > 0 {
			reached++
		}
	}
	fmt.Fprintf(w, "  coverage: %d of %d situations reached\n", reached, len(cs))
	for _, c := range cs {
		if c.Count > 0 {
			fmt.Fprintf(w, "    %6d  %s\n", c.Count, c.Name)
		}
	}
	for _, c := range cs {
		if c.Count == 0 {
			fmt.Fprintf(w, "    NOT REACHED %s: %s\n", c.Name, c.Why)
		}
	}
}

// chaosSmoke runs chaos --smoke: one line per protocol step, exit 1 if
// one failed.
func (a *app) chaosSmoke(cfg chaos.Config, asJSON bool) (int, error) {
	ctx, stop := signal.NotifyContext(a.ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Smoke(ctx, cfg)
	if ctx.Err() != nil {
		fmt.Fprintln(a.stderr, "deliverysim: chaos --smoke interrupted; the engine was killed, schema and temp files removed")
		return exitInterrupted, nil
	}
	if err != nil {
		return 0, &envError{err: fmt.Errorf("chaos --smoke: %v", err)}
	}
	if asJSON {
		if err := writeVersionedJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		for _, s := range rep.Steps {
			switch {
			case s.OK:
				fmt.Fprintf(a.stdout, "PASS %-9s (%s)\n", s.Step, s.Took)
			case s.NotReached:
				fmt.Fprintf(a.stdout, "---- %-9s %s\n", s.Step, s.Detail)
			default:
				fmt.Fprintf(a.stdout, "FAIL %-9s %s\n", s.Step, s.Detail)
			}
		}
		fmt.Fprintf(a.stdout, "smoke check took %s\n", rep.Took)
	}
	if rep.Failed() {
		return 1, nil
	}
	return 0, nil
}
