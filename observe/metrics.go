package observe

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
)

// Config configures an Observer. Zero values mean the documented defaults.
type Config struct {
	// Consumer is the consumer name, the value of the "consumer" label.
	// Required.
	Consumer string
	// Registry receives the metrics. Defaults to a new registry with the Go
	// and process collectors, served by Mux.
	Registry *prometheus.Registry
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider()
	// (a no-op unless a provider was installed, e.g. by SetupTracing).
	TracerProvider trace.TracerProvider
	// Store, if set, is counted by RunInboxStats for the inbox gauges.
	Store *inbox.Store
	// StatsInterval is how often RunInboxStats refreshes the inbox gauges.
	// Defaults to 15s.
	StatsInterval time.Duration
	// Logger logs failed inbox refreshes. Defaults to slog.Default().
	Logger *slog.Logger
}

type metrics struct {
	deliveries    *prometheus.CounterVec
	duplicates    prometheus.Counter
	deadLetters   *prometheus.CounterVec
	rejections    *prometheus.CounterVec
	runtimeErrors prometheus.Counter
	attempts      prometheus.Histogram
	handler       prometheus.Histogram
	commit        prometheus.Histogram
	delivery      prometheus.Histogram
	inFlight      prometheus.Gauge
	batchSize     prometheus.Histogram

	rows        *prometheus.GaugeVec
	oldestAge   prometheus.Gauge
	atThreshold prometheus.Gauge
	statsErrors prometheus.Counter

	purgeRows     prometheus.Counter
	purgeDuration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	l := prometheus.Labels{"consumer": name}
	counter := func(n, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: l})
	}
	counterVec := func(n, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: l}, labels)
	}
	gauge := func(n, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: help, ConstLabels: l})
	}
	hist := func(n, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: n, Help: help, ConstLabels: l, Buckets: buckets})
	}
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &metrics{
		deliveries:    counterVec("inboxkit_deliveries_total", "Settled deliveries by inbox outcome, broker action and resulting inbox status.", "outcome", "action", "status"),
		duplicates:    counter("inboxkit_duplicates_total", "Deliveries of an event id the inbox had already seen (acknowledged, nothing done)."),
		deadLetters:   counterVec("inboxkit_dead_letters_total", "Messages published to the dead-letter queue and acknowledged, by reason.", "reason"),
		rejections:    counterVec("inboxkit_rejections_total", "Business rejections recorded and acknowledged (and published to the reject queue when one is set), by reason.", "reason"),
		runtimeErrors: counter("inboxkit_runtime_errors_total", "Deliveries handed back to the broker because the inbox, the dead-letter queue or the broker failed."),
		attempts:      hist("inboxkit_delivery_attempts", "The inbox's attempt count of a delivery at its settlement.", []float64{1, 2, 3, 4, 5, 6, 8, 10, 20}),
		handler:       hist("inboxkit_handler_duration_seconds", "Time in the business handler, inside the inbox transaction.", latency),
		commit:        hist("inboxkit_commit_duration_seconds", "Time from the handler's return to the settlement: the inbox commit, then the acknowledgement or publish.", latency),
		delivery:      hist("inboxkit_delivery_duration_seconds", "Time from receiving a delivery to its settlement.", latency),
		inFlight:      gauge("inboxkit_deliveries_in_flight", "Deliveries received and not yet settled."),
		batchSize:     hist("inboxkit_batch_size", "Deliveries per database transaction of a consumer with BatchSize above 1.", []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000}),
		rows:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxkit_inbox_rows", Help: "Inbox rows of this consumer per status (refreshed periodically).", ConstLabels: l}, []string{"status"}),
		oldestAge:     gauge("inboxkit_inbox_oldest_nonterminal_age_seconds", "Age of the oldest RECEIVED, IN_PROGRESS or TECHNICAL_FAILURE row; 0 when there is none."),
		atThreshold:   gauge("inboxkit_inbox_rows_at_threshold", "Non-terminal rows whose attempts reached the backout threshold (they should have been dead-lettered)."),
		statsErrors:   counter("inboxkit_inbox_stats_errors_total", "Failed refreshes of the inbox gauges."),
		purgeRows:     counter("inboxkit_purge_rows_total", "Inbox rows deleted by retention."),
		purgeDuration: hist("inboxkit_purge_duration_seconds", "Duration of a retention purge.", []float64{.01, .1, 1, 10, 60, 300, 1800}),
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.duplicates, m.deadLetters, m.rejections, m.runtimeErrors,
		m.attempts, m.handler, m.commit, m.delivery, m.inFlight, m.batchSize, m.rows, m.oldestAge, m.atThreshold, m.statsErrors,
		m.purgeRows, m.purgeDuration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("observe: register metrics of consumer %s: %w", name, err)
		}
	}
	// Every status shows, with 0, before the first refresh.
	for _, st := range allStatuses {
		m.rows.WithLabelValues(string(st))
	}
	return m, nil
}

var allStatuses = []inboxkit.Status{inboxkit.StatusReceived, inboxkit.StatusInProgress, inboxkit.StatusProcessed,
	inboxkit.StatusRejected, inboxkit.StatusTechnicalFailure, inboxkit.StatusDeadLettered}

// Observer implements consumer.Observer with Prometheus metrics and
// OpenTelemetry spans. Create it with New.
type Observer struct {
	cfg    Config
	m      *metrics
	tracer trace.Tracer
}

// New registers the metrics of cfg.Consumer in cfg.Registry and returns
// the Observer.
func New(cfg Config) (*Observer, error) {
	if strings.TrimSpace(cfg.Consumer) == "" {
		return nil, fmt.Errorf("observe: Config.Consumer is required: the consumer name, the \"consumer\" label of every metric")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.StatsInterval == 0 {
		cfg.StatsInterval = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := newMetrics(cfg.Registry, cfg.Consumer)
	if err != nil {
		return nil, err
	}
	return &Observer{cfg: cfg, m: m, tracer: cfg.TracerProvider.Tracer("github.com/inboxkit/inboxkit/observe")}, nil
}

// Registry returns the registry holding the metrics.
func (o *Observer) Registry() *prometheus.Registry { return o.cfg.Registry }

// RefreshInbox counts the inbox once and sets the inbox gauges. Without a
// Config.Store it does nothing.
func (o *Observer) RefreshInbox(ctx context.Context) error {
	if o.cfg.Store == nil {
		return nil
	}
	st, err := o.cfg.Store.Stats(ctx)
	if err != nil {
		o.m.statsErrors.Inc()
		return err
	}
	rows := map[inboxkit.Status]int64{}
	var at int64
	for _, c := range st.Counts {
		if c.ConsumerName != o.cfg.Consumer {
			continue
		}
		rows[c.Status] += c.Rows
		if !c.Status.Terminal() {
			at += c.AtThreshold
		}
	}
	for _, s := range allStatuses {
		o.m.rows.WithLabelValues(string(s)).Set(float64(rows[s]))
	}
	o.m.atThreshold.Set(float64(at))
	age := 0.0
	if oldest, ok := st.OldestNonTerminal(o.cfg.Consumer); ok {
		age = max(st.At.Sub(oldest).Seconds(), 0)
	}
	o.m.oldestAge.Set(age)
	return nil
}

// RunInboxStats refreshes the inbox gauges every Config.StatsInterval
// until ctx is done. A failed refresh is counted and logged; the gauges
// keep their last values.
func (o *Observer) RunInboxStats(ctx context.Context) {
	if o.cfg.Store == nil {
		return
	}
	refreshEvery(ctx, o.cfg.StatsInterval, o.RefreshInbox, func(err error) {
		o.cfg.Logger.Debug("inbox gauges not refreshed", "consumer", o.cfg.Consumer, "error", err)
	})
}

// ObservePurge records one retention purge. [Observer.Purge] calls it;
// call it yourself for a purge run another way.
func (o *Observer) ObservePurge(rows int64, d time.Duration) {
	o.m.purgeRows.Add(float64(rows))
	o.m.purgeDuration.Observe(d.Seconds())
}

// Purge runs st.Purge and records it with ObservePurge: the rows deleted
// (also those of the committed batches of a purge that then failed or was
// cancelled) and its duration. A dry run, which deletes nothing, and a
// purge refused before it deleted anything are not recorded.
func (o *Observer) Purge(ctx context.Context, st *inbox.Store, opt inbox.PurgeOptions) (int64, error) {
	start := time.Now()
	n, err := st.Purge(ctx, opt)
	if !opt.DryRun && (err == nil || n > 0) {
		o.ObservePurge(n, time.Since(start))
	}
	return n, err
}
