package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/runtime"
)

// serveFlags are `deliverysim serve`'s settings. Every flag can also come
// from the environment: DELIVERYSIM_ + the flag name upper-cased with
// dashes as underscores (--webhook-timeout = DELIVERYSIM_WEBHOOK_TIMEOUT);
// a flag on the command line wins.
type serveFlags struct {
	backend, dsn, schema   string
	maxConns               int
	upstream, registry     string
	listen                 string
	logFormat, logLevel    string
	node                   string
	bugs                   string
	plant                  string
	cursorMode, handoff    string
	retentionScope         string
	pollWait, storeTimeout time.Duration
	drainTimeout           time.Duration

	eng engine.Config
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.backend, "backend", "memory", "store backend: memory (lost on exit; for trying it out) or postgres")
	fs.StringVar(&f.dsn, "dsn", "", "Postgres DSN (also DELIVERYSIM_PG_DSN; default the local server "+defaultDSN+")")
	fs.StringVar(&f.schema, "schema", pgstore.DefaultSchema, "Postgres schema holding the tables (created and migrated if needed)")
	fs.IntVar(&f.maxConns, "max-conns", 8, "Postgres connection pool size")
	fs.StringVar(&f.upstream, "upstream", "", "upstream base URL (runtime/PROTOCOL.md), e.g. http://127.0.0.1:7001 (required)")
	fs.StringVar(&f.registry, "registry", "", "registry base URL (runtime/PROTOCOL.md), e.g. http://127.0.0.1:7002 (required)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9464", "address for /metrics, /healthz and /readyz (\"\" = none)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.node, "node", "", "this node's name, the lease owner in the store (default host-pid)")
	fs.StringVar(&f.bugs, "bugs", "", "known-bug engine variants, comma-separated (for certification runs only): "+strings.Join(bugNames(), ", "))
	fs.StringVar(&f.plant, "plant", "", "planted wire-visible faults of the runtime, comma-separated (chaos's own tests only): "+strings.Join(runtime.PlantNames(), ", "))
	fs.StringVar(&f.cursorMode, "cursor-mode", "sync", "cursor writes: sync (after hand-off) or async (fire-and-forget, seed 000)")
	fs.StringVar(&f.handoff, "handoff", "queued", "hand-off of new events: queued (a queue row per delivery) or direct (send first, row only on failure)")
	fs.StringVar(&f.retentionScope, "retention-scope", "all", "what --retention-ttl and --retention-max apply to: all (every queued message) or held (only messages held for a bot whose key is not yet published, seed 000's enqueued messages; needs --backend postgres)")
	fs.DurationVar(&f.pollWait, "poll-wait", 10*time.Second, "long-poll wait of upstream and registry requests")
	fs.DurationVar(&f.storeTimeout, "store-timeout", 5*time.Second, "bound on every store call (a stalled database connection fails instead of freezing the engine)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 10*time.Second, "on SIGTERM, how long to wait for in-flight webhook requests")

	registerEngineFlags(fs, &f.eng, engine.DefaultConfig())
}

// registerEngineFlags binds e's tunable settings to fs, defaulting to d's.
// serve sets the engine with them; chaos declares with them the settings
// of the engine it judges (and renders them back into serve's command line
// for the reference, engineArgs), so each setting has one flag name.
func registerEngineFlags(fs *flag.FlagSet, e *engine.Config, d engine.Config) {
	fs.IntVar(&e.MaxAttempts, "max-attempts", d.MaxAttempts, "attempts per message before it is dead-lettered")
	fs.DurationVar(&e.InitialBackoff, "initial-backoff", d.InitialBackoff, "wait after the first failed attempt")
	fs.Float64Var(&e.Multiplier, "backoff-multiplier", d.Multiplier, "backoff growth per failed attempt")
	fs.DurationVar(&e.MaxBackoff, "max-backoff", d.MaxBackoff, "longest wait between attempts")
	fs.Float64Var(&e.JitterFraction, "jitter", d.JitterFraction, "random extra wait, as a fraction of the backoff (0-1)")
	fs.IntVar(&e.BreakerFailures, "breaker-failures", d.BreakerFailures, "consecutive failures that open a bot's circuit breaker")
	fs.DurationVar(&e.BreakerOpenFor, "breaker-open-for", d.BreakerOpenFor, "how long an open breaker waits before half-opening")
	fs.IntVar(&e.BreakerCloseAfter, "breaker-close-after", d.BreakerCloseAfter, "successes in half-open that close the breaker")
	fs.DurationVar(&e.RetentionTTL, "retention-ttl", d.RetentionTTL, "queued messages older than this are dropped (counted)")
	fs.IntVar(&e.RetentionMax, "retention-max", d.RetentionMax, "most queued messages per bot; the oldest are trimmed (counted)")
	fs.DurationVar(&e.CleanupInterval, "cleanup-interval", d.CleanupInterval, "period of retention cleanup and the queue sweep")
	fs.DurationVar(&e.ClockSkewBudget, "clock-skew-budget", d.ClockSkewBudget, "extra TTL allowing for clock differences between nodes")
	fs.DurationVar(&e.WebhookTimeout, "webhook-timeout", d.WebhookTimeout, "per-request webhook timeout")
	fs.DurationVar(&e.Lease, "lease", d.Lease, "queue lease per claimed message (must exceed --webhook-timeout)")
	fs.IntVar(&e.MaxInFlightPerBot, "max-in-flight-per-bot", d.MaxInFlightPerBot, "webhook requests outstanding per bot")
	fs.DurationVar(&e.TimestampLookback, "timestamp-lookback", d.TimestampLookback, "replay window behind a timestamp cursor (covers producer clock skew)")
	fs.DurationVar(&e.StoreRetry, "store-retry", d.StoreRetry, "wait before retrying after a store error")
	fs.DurationVar(&e.AckDelay, "ack-delay", d.AckDelay, "queued hand-off with sync cursors: hold acks and cursor writes up to this long to commit them with the next batch (0 = at once; must be below --lease minus --webhook-timeout)")
}

// engineFlags is the engine flags alone, bound to a Config of their own
// and defaulting to engine.DefaultConfig.
func engineFlags() (*flag.FlagSet, *engine.Config) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	e := new(engine.Config)
	registerEngineFlags(fs, e, engine.DefaultConfig())
	return fs, e
}

// engineArgs renders c's tunable settings as serve's flags: only those that
// differ from engine.DefaultConfig, in flag-name order.
func engineArgs(c engine.Config) []string {
	fs, e := engineFlags()
	*e = c // the flags read the values through their pointers into e
	var args []string
	fs.VisitAll(func(f *flag.Flag) {
		if v := f.Value.String(); v != f.DefValue {
			args = append(args, "--"+f.Name, v)
		}
	})
	return args
}

// validateEngine checks cfg's tunable settings as engine.New will, for
// command cmd; the node, clock and random source are the runtime's.
func validateEngine(cmd string, cfg engine.Config) error {
	if cfg.Node == "" {
		cfg.Node = "node"
	}
	cfg.Clock = wall{}
	if cfg.Rand == nil {
		cfg.Rand = mrand.New(mrand.NewPCG(1, 2)) // the runtime injects its own; any will do to validate
	}
	if err := cfg.Validate(); err != nil {
		var ce *engine.ConfigError
		if errors.As(err, &ce) {
			if name := engineFlagOf(ce.Field); name != "" {
				return usagef("%s: --%s: %v (see deliverysim %s -h)", cmd, name, err, cmd)
			}
		}
		return usagef("%s: %v (see deliverysim %s -h)", cmd, err, cmd)
	}
	return nil
}

// engineFlagOf names the flag that sets engine.Config's field, or "" if
// none does: the flag whose value is that field (found by address, so the
// answer follows registerEngineFlags).
func engineFlagOf(field string) string {
	fs, e := engineFlags()
	sf, ok := reflect.TypeFor[engine.Config]().FieldByName(field)
	if !ok {
		return ""
	}
	addr := reflect.ValueOf(e).Elem().FieldByIndex(sf.Index).Addr().Pointer()
	name := ""
	fs.VisitAll(func(f *flag.Flag) {
		if v := reflect.ValueOf(f.Value); v.Kind() == reflect.Pointer && v.Pointer() == addr {
			name = f.Name
		}
	})
	return name
}

// fromEnv sets every flag not given on the command line from its
// DELIVERYSIM_* variable.
func fromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

func envName(flagName string) string {
	return "DELIVERYSIM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (a *app) cmdServe(args []string) (int, error) {
	fs := newFlagSet("serve", a.stderr)
	var f serveFlags
	f.register(fs)
	if err := a.parse(fs, args); err != nil {
		if errors.Is(err, errHelp) {
			fmt.Fprintln(a.stdout, "\nEvery flag can also be set in the environment as DELIVERYSIM_<FLAG> (upper case, - as _),\ne.g. DELIVERYSIM_WEBHOOK_TIMEOUT=5s; the command line wins. The protocol: runtime/PROTOCOL.md.\nSIGTERM or SIGINT drains in-flight requests and exits 0.")
		}
		return 0, err
	}
	if err := fromEnv(fs, a.getenv); err != nil {
		return 0, err
	}
	if f.dsn == "" {
		f.dsn = a.getenv("DELIVERYSIM_PG_DSN")
	}
	log, err := newLogger(a, f.logFormat, f.logLevel)
	if err != nil {
		return 0, err
	}
	cfg, err := f.engineConfig()
	if err != nil {
		return 0, err
	}
	plant, err := runtime.ParsePlants(f.plant)
	if err != nil {
		return 0, usagef("serve: --plant: %v", err)
	}
	if f.retentionScope != "all" && f.retentionScope != "held" {
		return 0, usagef("serve: --retention-scope %q: use all or held", f.retentionScope)
	}
	if f.retentionScope == "held" && f.backend != "postgres" {
		return 0, usagef("serve: --retention-scope held needs --backend postgres (the memory store cannot limit retention to some bots)")
	}
	if f.upstream == "" || f.registry == "" {
		return 0, usagef("serve: --upstream and --registry are required (the protocol servers' base URLs; see runtime/PROTOCOL.md)")
	}
	for _, u := range []struct{ flag, v string }{{"--upstream", f.upstream}, {"--registry", f.registry}} {
		if err := checkBaseURL(u.flag, u.v); err != nil {
			return 0, err
		}
	}

	ctx, stop := signal.NotifyContext(a.ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	store, closeStore, err := f.openStore(ctx, a, log)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while still looking for its database: nothing was
			// started, so nothing to drain; a stop asked for is a clean one.
			log.Info("stopped before the store opened", "err", err)
			return 0, nil
		}
		return 0, err
	}
	defer closeStore()

	m := runtime.NewMetrics()
	var ready, draining atomic.Bool
	if f.listen != "" {
		ln, err := net.Listen("tcp", f.listen)
		if err != nil {
			return 0, &envError{err: fmt.Errorf("serve: --listen %s: %v (pick a free address, or \"\" for none)", f.listen, err)}
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		mux.Handle(runtime.ObservePath, runtime.ObserveHandler(store, f.storeTimeout, plant))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready.Load() || draining.Load() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving metrics", "addr", ln.Addr().String())
	}
	err = runtime.Run(ctx, runtime.Options{
		Engine: cfg, Store: store, Upstream: strings.TrimRight(f.upstream, "/"), Registry: strings.TrimRight(f.registry, "/"),
		Logger: log, Metrics: m, PollWait: f.pollWait, StoreTimeout: f.storeTimeout, DrainTimeout: f.drainTimeout,
		Ready: func() { ready.Store(true) }, Plant: plant, RetentionHeldOnly: f.retentionScope == "held",
	})
	draining.Store(true)
	if err != nil && ctx.Err() != nil {
		// SIGTERM/SIGINT before the engine had started (the registry had
		// not answered yet): the README promises exit 0 after a signal,
		// whatever stage serve had reached.
		log.Info("stopped before the engine started", "err", err)
		err = nil
	}
	if err != nil {
		return 0, &envError{err: err}
	}
	log.Info("stopped")
	return 0, nil
}

func (f *serveFlags) engineConfig() (engine.Config, error) {
	cfg := f.eng
	cfg.Node = f.node
	if cfg.Node == "" {
		host, _ := os.Hostname()
		cfg.Node = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	switch f.cursorMode {
	case "sync":
		cfg.CursorMode = engine.CursorSync
	case "async":
		cfg.CursorMode = engine.CursorAsync
	default:
		return cfg, usagef("serve: --cursor-mode %q: use sync or async", f.cursorMode)
	}
	switch f.handoff {
	case "queued":
		cfg.HandOff = engine.HandOffQueued
	case "direct":
		cfg.HandOff = engine.HandOffDirect
	default:
		return cfg, usagef("serve: --handoff %q: use queued or direct", f.handoff)
	}
	bugs, _, err := parseBugs(f.bugs)
	if err != nil {
		return cfg, err
	}
	cfg.Bugs = bugs
	if err := validateEngine("serve", cfg); err != nil {
		return cfg, err
	}
	return cfg, nil // the runtime injects its wall clock and random source
}

// checkBaseURL refuses a protocol server's base URL that is not an
// absolute http or https URL: anything else would only fail later, on
// every poll, with a message about the request rather than the flag.
func checkBaseURL(flagName, v string) error {
	u, err := url.Parse(v)
	if err != nil {
		return usagef("serve: %s %q is not a URL: %v", flagName, v, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return usagef("serve: %s %q: the scheme must be http or https, e.g. http://127.0.0.1:7001", flagName, v)
	}
	if u.Host == "" {
		return usagef("serve: %s %q has no host; write it like http://127.0.0.1:7001", flagName, v)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return usagef("serve: %s %q: a base URL takes no query or fragment", flagName, v)
	}
	return nil
}

type wall struct{}

func (wall) Now() time.Time { return time.Now() }

func (f *serveFlags) openStore(ctx context.Context, a *app, log *slog.Logger) (impl.Store, func(), error) {
	switch f.backend {
	case "memory":
		log.Warn("memory backend: the queue and cursors are lost when this process exits")
		s := memstore.New()
		return s, func() { _ = s.Close() }, nil
	case "postgres", "pg":
		if f.dsn == "" {
			f.dsn = defaultDSN
			log.Info("no --dsn and no DELIVERYSIM_PG_DSN; using the local server", "dsn", defaultDSN)
		}
		// The database may be down or unreachable for a while (a chaos
		// harness cuts it): retry for a bounded time before giving up.
		deadline := time.Now().Add(time.Minute)
		for {
			octx, cancel := context.WithTimeout(ctx, 15*time.Second)
			s, err := pgstore.Open(octx, f.dsn, pgstore.Options{Schema: f.schema, Migrate: true, MaxConns: int32(f.maxConns), ApplicationName: "deliverysim-serve"})
			cancel()
			if err == nil {
				return s, func() { _ = s.Close() }, nil
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return nil, nil, &envError{err: pgstore.DescribeConnError(f.dsn, err)}
			}
			log.Warn("postgres unavailable; retrying", "err", err)
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
	return nil, nil, usagef("serve: --backend %q: use memory or postgres", f.backend)
}

func newLogger(a *app, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: use text or json", format)
}
