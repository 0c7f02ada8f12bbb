package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
)

// logState turns settlements into few log lines: a summary per
// Config.SummaryInterval with the counts since the last one, and an outage
// (deliveries handed back because the inbox, the DLQ or the broker failed)
// logged when it starts, once per interval while it lasts, and when it ends
// — never one line per message per redelivery above debug level.
type logState struct {
	mu     sync.Mutex
	counts summaryCounts
	since  time.Time

	outageStart time.Time // zero: no outage
	outageLast  time.Time // last outage line
	outageN     int       // deliveries handed back in this outage
}

// summaryCounts are the counts of one summary line. settled counts the
// deliveries settled with the broker, but for those handed back because
// the runtime failed (handedBack: a delivery handed back comes again and
// is counted when it is settled); the others count outcomes, also those
// of ModeStoreThenProcess's workers (countWorker), whose entries were
// settled with the broker when they were stored.
type summaryCounts struct {
	settled                                                                    int
	processed, stored, duplicates, rejected, deadLettered, retried, handedBack int
}

func (n summaryCounts) empty() bool { return n == summaryCounts{} }

// logSettled counts s and logs the outage's start, progress and end.
func (c *Consumer) logSettled(s Settled) {
	l := &c.logs
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since.IsZero() {
		l.since = now
	}
	if s.Err == nil {
		l.counts.settled++
	}
	switch {
	case s.Err != nil:
		l.counts.handedBack++
	case s.Action == inboxkit.ActionDeadLetter:
		l.counts.deadLettered++
	case s.Action == inboxkit.ActionReject || s.Result.Outcome == inboxkit.OutcomeRejected:
		l.counts.rejected++
	case s.Action == inboxkit.ActionRequeue:
		l.counts.retried++
	case s.Result.Outcome == inboxkit.OutcomeDuplicate:
		l.counts.duplicates++
	case s.Result.Outcome == inboxkit.OutcomeStored:
		l.counts.stored++
	default:
		l.counts.processed++
	}
	log := c.cfg.Logger
	if s.Err != nil {
		l.outageN++
		switch {
		case l.outageStart.IsZero():
			l.outageStart, l.outageLast = now, now
			log.Error(outageStarted, "consumer", c.cfg.Name,
				"error", s.Err.Error(), "unavailable", classify.Unavailable(s.Err), "event_id", s.Message.ID, "correlation_id", s.Message.CorrelationID)
		case now.Sub(l.outageLast) >= c.cfg.SummaryInterval:
			l.outageLast = now
			log.Error("outage continues", "consumer", c.cfg.Name, "error", s.Err.Error(),
				"since", l.outageStart.UTC().Format(time.RFC3339), "handed_back", l.outageN)
		}
		return
	}
	if !l.outageStart.IsZero() {
		log.Info("outage over", "consumer", c.cfg.Name, "lasted", now.Sub(l.outageStart).Round(time.Millisecond).String(),
			"handed_back", l.outageN)
		l.outageStart, l.outageN = time.Time{}, 0
	}
}

// outageStarted is the line that says an outage began.
const outageStarted = "outage: intake stopped until the database and the dead-letter queue answer; the deliveries in hand are handed back"

// logProbe logs a failed probe of an outage once per SummaryInterval, as
// "outage continues".
func (c *Consumer) logProbe(err error) {
	l := &c.logs
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outageStart.IsZero() || now.Sub(l.outageLast) < c.cfg.SummaryInterval {
		return
	}
	l.outageLast = now
	c.cfg.Logger.Error("outage continues", "consumer", c.cfg.Name, "probe_error", err.Error(),
		"since", l.outageStart.UTC().Format(time.RFC3339), "handed_back", l.outageN)
}

// countWorker counts the outcome of an entry a worker of
// ModeStoreThenProcess processed (res, or err when it could not be
// recorded: the worker logs that, and the entry is retried after its
// lease). The worker logs the outcome's line; the entry was settled with
// the broker when it was stored.
func (c *Consumer) countWorker(res inbox.Result, err error) {
	if err != nil {
		return
	}
	l := &c.logs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since.IsZero() {
		l.since = time.Now()
	}
	switch res.Outcome {
	case inboxkit.OutcomeProcessed:
		l.counts.processed++
	case inboxkit.OutcomeDuplicate:
		l.counts.duplicates++
	case inboxkit.OutcomeRejected:
		l.counts.rejected++
	case inboxkit.OutcomeDeadLetter:
		l.counts.deadLettered++
	case inboxkit.OutcomeRetry:
		l.counts.retried++
	}
}

// logSummary logs the counts since the last summary, if anything happened.
func (c *Consumer) logSummary() {
	l := &c.logs
	l.mu.Lock()
	n, since := l.counts, l.since
	l.counts, l.since = summaryCounts{}, time.Now()
	l.mu.Unlock()
	if n.empty() {
		return
	}
	attrs := []any{slog.String("consumer", c.cfg.Name), slog.Int("settled", n.settled)}
	add := func(k string, v int) {
		if v > 0 {
			attrs = append(attrs, slog.Int(k, v))
		}
	}
	add("processed", n.processed)
	add("stored", n.stored)
	add("duplicates", n.duplicates)
	add("rejected", n.rejected)
	add("dead_lettered", n.deadLettered)
	add("retried", n.retried)
	add("handed_back", n.handedBack)
	if !since.IsZero() {
		attrs = append(attrs, slog.String("since", since.UTC().Format(time.RFC3339)))
	}
	c.cfg.Logger.Info("summary", attrs...)
}

// summarize logs a summary every Config.SummaryInterval until ctx is done.
func (c *Consumer) summarize(ctx context.Context) {
	if c.cfg.SummaryInterval <= 0 {
		return
	}
	t := time.NewTicker(c.cfg.SummaryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.logSummary()
		}
	}
}

// logLine logs one settlement: at debug level, at warn for a dead letter.
// Its attributes are built only when the logger takes the line.
func (c *Consumer) logLine(s Settled) {
	// One line per message at debug; info has the summary and outages
	// (logSettled), warn each dead letter.
	level := slog.LevelDebug
	if s.Err == nil && s.Action == inboxkit.ActionDeadLetter {
		level = slog.LevelWarn
		if s.Result.Reason == inboxkit.ReasonUnknownStatus {
			level = slog.LevelError // an operator must map the status (its error says how)
		}
	}
	ctx := context.Background()
	if !c.cfg.Logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("consumer", c.cfg.Name),
		slog.String("event_id", s.Message.ID),
	}
	if s.Message.EventIDSource != "" {
		attrs = append(attrs, slog.String("event_id_source", s.Message.EventIDSource))
	}
	attrs = append(attrs,
		slog.String("correlation_id", s.Message.CorrelationID),
		slog.String("action", string(s.Action)),
	)
	if s.Result.Outcome != "" {
		attrs = append(attrs, slog.String("outcome", string(s.Result.Outcome)))
	}
	if s.Result.Status != "" {
		attrs = append(attrs, slog.String("status", string(s.Result.Status)))
	}
	if s.Result.Reason != "" {
		attrs = append(attrs, slog.String("reason", s.Result.Reason))
	}
	if s.Result.Attempts > 0 {
		attrs = append(attrs, slog.Int("attempts", s.Result.Attempts))
	}
	if s.Action == inboxkit.ActionRequeue {
		attrs = append(attrs, slog.Duration("delay", s.Delay))
	}
	if s.Result.Err != nil {
		attrs = append(attrs, slog.String("error", s.Result.Err.Error()))
	}
	if s.Err != nil {
		attrs = append(attrs, slog.String("runtime_error", s.Err.Error()))
	}
	c.cfg.Logger.LogAttrs(ctx, level, "settled", attrs...)
}
