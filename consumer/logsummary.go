package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/inboxkit/inboxkit"
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

type summaryCounts struct {
	processed, stored, duplicates, rejected, deadLettered, retried, handedBack int
}

func (n summaryCounts) total() int {
	return n.processed + n.stored + n.duplicates + n.rejected + n.deadLettered + n.retried + n.handedBack
}

// settled counts s and logs the outage's start, progress and end.
func (c *Consumer) logSettled(s Settled) {
	l := &c.logs
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since.IsZero() {
		l.since = now
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
			log.Error("outage: deliveries are handed back to the broker until it ends", "consumer", c.cfg.Name,
				"error", s.Err.Error(), "event_id", s.Message.ID, "correlation_id", s.Message.CorrelationID)
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

// logSummary logs the counts since the last summary, if anything happened.
func (c *Consumer) logSummary() {
	l := &c.logs
	l.mu.Lock()
	n, since := l.counts, l.since
	l.counts, l.since = summaryCounts{}, time.Now()
	l.mu.Unlock()
	if n.total() == 0 {
		return
	}
	attrs := []any{slog.String("consumer", c.cfg.Name), slog.Int("settled", n.total())}
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
