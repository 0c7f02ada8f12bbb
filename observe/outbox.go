package observe

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxkit/inboxkit/outbox"
)

// RelayMetrics implements outbox.RelayObserver with Prometheus metrics
// labelled by destination (a queue, or an endpoint's scheme://host: see
// outbox.DestinationLabel), and keeps the outbox gauges fresh (Refresh,
// Run). Create it with NewRelayMetrics. It is safe for concurrent use.
//
//	inboxkit_outbox_sent_total{destination}                  confirmed by the destination
//	inboxkit_outbox_failed_total{destination}                failed sends, tried again
//	inboxkit_outbox_parked_total{destination}                messages parked (attempts used up, or refused)
//	inboxkit_outbox_relay_lag_seconds{destination}           histogram: write (Add) to confirm
//	inboxkit_outbox_pending_rows{destination}                PENDING rows (refreshed)
//	inboxkit_outbox_parked_rows{destination}                 PARKED rows (refreshed)
//	inboxkit_outbox_oldest_pending_age_seconds{destination}  age of the oldest PENDING row, 0 without one
//	inboxkit_outbox_stats_errors_total                       failed refreshes
type RelayMetrics struct {
	store  *outbox.Store
	logger *slog.Logger

	sent, failed, parked *prometheus.CounterVec
	lag                  *prometheus.HistogramVec
	pending, parkedRows  *prometheus.GaugeVec
	oldest               *prometheus.GaugeVec
	statsErrors          prometheus.Counter

	mu   sync.Mutex
	seen map[string]bool // destination labels the gauges have shown
}

// NewRelayMetrics registers the outbox metrics in reg; store is the outbox
// whose rows Refresh counts (nil: the gauges are not refreshed). logger
// (nil: slog.Default()) logs failed refreshes.
func NewRelayMetrics(reg prometheus.Registerer, store *outbox.Store, logger *slog.Logger) (*RelayMetrics, error) {
	if logger == nil {
		logger = slog.Default()
	}
	d := []string{"destination"}
	m := &RelayMetrics{
		store: store, logger: logger, seen: map[string]bool{},
		sent:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxkit_outbox_sent_total", Help: "Outbox messages their destination confirmed, by destination."}, d),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxkit_outbox_failed_total", Help: "Outbox sends that failed and will be tried again, by destination."}, d),
		parked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inboxkit_outbox_parked_total", Help: "Outbox messages parked (attempts used up, or refused for good), by destination."}, d),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "inboxkit_outbox_relay_lag_seconds", Help: "Time from an outbox message's write (in its transaction) to its destination's confirm.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, d),
		pending:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxkit_outbox_pending_rows", Help: "PENDING outbox rows, by destination (refreshed periodically)."}, d),
		parkedRows:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxkit_outbox_parked_rows", Help: "PARKED outbox rows waiting for an operator, by destination (refreshed periodically)."}, d),
		oldest:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "inboxkit_outbox_oldest_pending_age_seconds", Help: "Age of the oldest PENDING outbox row, by destination; 0 when there is none."}, d),
		statsErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "inboxkit_outbox_stats_errors_total", Help: "Failed refreshes of the outbox gauges."}),
	}
	for _, c := range []prometheus.Collector{m.sent, m.failed, m.parked, m.lag, m.pending, m.parkedRows, m.oldest, m.statsErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("observe: register the outbox metrics: %w", err)
		}
	}
	return m, nil
}

// Sent implements outbox.RelayObserver.
func (m *RelayMetrics) Sent(destination string, lag time.Duration) {
	l := outbox.DestinationLabel(destination)
	m.sent.WithLabelValues(l).Inc()
	m.lag.WithLabelValues(l).Observe(max(lag.Seconds(), 0))
}

// Failed implements outbox.RelayObserver.
func (m *RelayMetrics) Failed(destination string, _ error) {
	m.failed.WithLabelValues(outbox.DestinationLabel(destination)).Inc()
}

// Parked implements outbox.RelayObserver.
func (m *RelayMetrics) Parked(destination string, _ error) {
	m.parked.WithLabelValues(outbox.DestinationLabel(destination)).Inc()
}

// Refresh counts the PENDING and PARKED rows once and sets the gauges; a
// destination seen before and now without rows shows 0.
func (m *RelayMetrics) Refresh(ctx context.Context) error {
	if m.store == nil {
		return nil
	}
	counts, err := m.store.Stats(ctx, false)
	if err != nil {
		m.statsErrors.Inc()
		return err
	}
	now := time.Now()
	type agg struct {
		pending, parked float64
		oldest          time.Time
	}
	by := map[string]*agg{}
	for _, c := range counts {
		l := outbox.DestinationLabel(c.Destination)
		a := by[l]
		if a == nil {
			a = &agg{}
			by[l] = a
		}
		switch c.Status {
		case outbox.StatusPending:
			a.pending += float64(c.Rows)
			if c.Oldest != nil && (a.oldest.IsZero() || c.Oldest.Before(a.oldest)) {
				a.oldest = *c.Oldest
			}
		case outbox.StatusParked:
			a.parked += float64(c.Rows)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range by {
		m.seen[l] = true
	}
	for l := range m.seen {
		a := by[l]
		if a == nil {
			a = &agg{}
		}
		age := 0.0
		if !a.oldest.IsZero() {
			age = max(now.Sub(a.oldest).Seconds(), 0)
		}
		m.pending.WithLabelValues(l).Set(a.pending)
		m.parkedRows.WithLabelValues(l).Set(a.parked)
		m.oldest.WithLabelValues(l).Set(age)
	}
	return nil
}

// Run refreshes the gauges every interval (0: 15s) until ctx is done. A
// failed refresh is counted and logged; the gauges keep their last values.
func (m *RelayMetrics) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 15 * time.Second
	}
	refreshEvery(ctx, interval, m.Refresh, func(err error) { m.logger.Debug("outbox gauges not refreshed", "error", err) })
}

// refreshEvery calls refresh at once and then every interval, each call
// bounded by interval, until ctx is done; failed reports a failure.
func refreshEvery(ctx context.Context, interval time.Duration, refresh func(context.Context) error, failed func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, interval)
		if err := refresh(rctx); err != nil && ctx.Err() == nil {
			failed(err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
