package runtime

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// Metrics are the runtime's Prometheus metrics, in a registry of their own
// (no process-global state, so tests can run several runtimes).
type Metrics struct {
	reg *prometheus.Registry

	mu       sync.Mutex
	counters engine.Counters
	// overcount is the OvercountAcked plant (Plants).
	overcount bool

	webhook      *prometheus.HistogramVec
	unwritten    prometheus.Counter
	delivery     prometheus.Histogram
	deadLetters  *prometheus.CounterVec
	queueDepth   *prometheus.GaugeVec
	deadInStore  *prometheus.GaugeVec
	breaker      *prometheus.GaugeVec
	cursorLag    *prometheus.GaugeVec
	cursorLagEvs *prometheus.GaugeVec
	storeErrors  *prometheus.CounterVec
	upstream     *prometheus.CounterVec
	ready        prometheus.Gauge
}

// engineCounters maps each engine counter to its metric.
var engineCounters = []struct {
	name, help string
	get        func(engine.Counters) int
}{
	{"enqueued", "messages written to the queue", func(c engine.Counters) int { return c.Enqueued }},
	{"sent", "webhook requests sent (attempts)", func(c engine.Counters) int { return c.Sent }},
	{"sent_direct", "webhook requests sent with no queue row (direct hand-off)", func(c engine.Counters) int { return c.SentDirect }},
	{"acked", "deliveries answered 2xx (queued and direct)", func(c engine.Counters) int { return c.Acked }},
	{"delivered_direct", "direct sends answered 2xx", func(c engine.Counters) int { return c.Delivered }},
	{"failed", "failed attempts (timeout, refused, non-2xx)", func(c engine.Counters) int { return c.Failed }},
	{"dead_lettered", "messages dead-lettered after the last attempt", func(c engine.Counters) int { return c.DeadLettered }},
	{"requeued", "dead letters made live again", func(c engine.Counters) int { return c.Requeued }},
	{"retention_ttl", "messages dropped by the TTL rule", func(c engine.Counters) int { return c.RetentionTTL }},
	{"retention_cap", "messages dropped by the per-bot cap", func(c engine.Counters) int { return c.RetentionCap }},
	{"breaker_opened", "circuit breaker openings", func(c engine.Counters) int { return c.BreakerOpened }},
	{"store_errors", "store calls that failed, as the engine saw them", func(c engine.Counters) int { return c.StoreErrors }},
	{"cursor_writes", "cursor writes", func(c engine.Counters) int { return c.CursorWrites }},
}

// NewMetrics registers every metric in a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range engineCounters {
		get := c.get
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "deliverysim_engine_" + c.name + "_total", Help: "Engine counter: " + c.help + " (since this process started).",
		}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return float64(get(m.counters))
		}))
	}
	m.webhook = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "deliverysim_webhook_duration_seconds", Help: "Webhook request duration by outcome (ok, status, timeout, refused).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"outcome"})
	m.delivery = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "deliverysim_delivery_latency_seconds", Help: "From an event reaching this process to its 2xx answer, per (bot, event).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	})
	m.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deliverysim_dead_letters_total", Help: "Messages this process dead-lettered, per bot.",
	}, []string{"bot"})
	m.queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deliverysim_queue_depth", Help: "Live (not dead) messages in the store's queue, per bot (sampled).",
	}, []string{"bot"})
	m.deadInStore = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deliverysim_dead_letters", Help: "Dead letters held in the store, per bot (sampled).",
	}, []string{"bot"})
	m.breaker = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deliverysim_breaker_state", Help: "Circuit breaker state per bot: 0 closed, 1 half-open, 2 open.",
	}, []string{"bot"})
	m.cursorLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deliverysim_cursor_lag_seconds", Help: "Age of the oldest event received from the upstream that the durable cursor has not passed, per stream.",
	}, []string{"stream"})
	m.cursorLagEvs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deliverysim_cursor_lag_events", Help: "Events received from the upstream that the durable cursor has not passed, per stream.",
	}, []string{"stream"})
	m.unwritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "deliverysim_webhook_unwritten_total", Help: "Webhook requests sent again, uncounted, because the last try never left this process whole before its timeout.",
	})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deliverysim_store_errors_total", Help: "Store calls that returned an error, per method.",
	}, []string{"method"})
	m.upstream = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deliverysim_upstream_events_total", Help: "Events received from the upstream (duplicates and replays included), per stream.",
	}, []string{"stream"})
	m.ready = prometheus.NewGauge(prometheus.GaugeOpts{Name: "deliverysim_ready", Help: "1 once the engine has started and until it drains."})
	m.reg.MustRegister(m.webhook, m.delivery, m.deadLetters, m.queueDepth, m.deadInStore, m.breaker,
		m.cursorLag, m.cursorLagEvs, m.storeErrors, m.upstream, m.ready, m.unwritten)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is the Prometheus registry (to add a process's own metrics).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) setCounters(c engine.Counters) {
	m.mu.Lock()
	if m.overcount {
		c.Acked *= 2
	}
	m.counters = c
	m.mu.Unlock()
}

// breakerState turns a breaker note's "from->to" into the gauge value.
func breakerState(detail string) (float64, bool) {
	to, ok := engine.BreakerMovedTo(detail)
	if !ok {
		return 0, false
	}
	switch to {
	case "closed":
		return 0, true
	case "half-open":
		return 1, true
	case "open":
		return 2, true
	}
	return 0, false
}
