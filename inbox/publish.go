package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/dlq"
	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// Publisher publishes a message to a destination and returns once the
// broker confirmed it (rule 3). dlq.Publisher and every broker adapter of
// this module satisfy it.
type Publisher interface {
	Publish(ctx context.Context, destination string, headers map[string]string, body []byte) error
}

// Ports are where a Store publishes what it dead-letters and rejects; see
// Store.WithPorts.
type Ports struct {
	// DeadLetters publishes dead letters (poison, the backout threshold
	// reached) to DeadLetterQueue. Required.
	DeadLetters     Publisher
	DeadLetterQueue string
	// Rejects publishes business rejections to RejectQueue, with the same
	// envelope. Without a RejectQueue rejections are only recorded.
	// Defaults to DeadLetters.
	Rejects     Publisher
	RejectQueue string
	// Clock stamps the envelopes (inboxkit-dlq-time). Defaults to the
	// store's.
	Clock inboxkit.Clock
}

// WithPorts returns a Store on the same table, database and configuration
// (it shares the receiver's state) that publishes its dead letters and
// rejections itself, in both variants, by one protocol: in one
// transaction the row is recorded (DEAD_LETTERED, REJECTED), the envelope
// (package dlq) published while that uncommitted write holds the row, and
// the transaction committed only after the publish; when the publish
// fails the row stays as it was and the attempt is given back (the
// delivery is handed back, or the entry retried after its backoff). So a
// message is in the dead-letter queue once per event, and never marked
// there without being there.
//
// With ports, Process and ProcessBatch return DEAD_LETTER results
// already published (Status DEAD_LETTERED; a delivery that found its
// event dead-lettered by another one meanwhile is a DUPLICATE), and a
// Worker dead-letters and rejects through them. The envelope is built from
// Entry.Message (the claim's Message for a Worker). Package consumer sets
// the ports of its Config once, in New.
func (s *Store) WithPorts(p Ports) (*Store, error) {
	if p.DeadLetters == nil || p.DeadLetterQueue == "" {
		return nil, errors.New("inbox: Ports.DeadLetters and Ports.DeadLetterQueue are required: a store that publishes must be able to dead-letter")
	}
	if p.Rejects == nil {
		p.Rejects = p.DeadLetters
	}
	if p.Clock == nil {
		p.Clock = s.cfg.Clock
	}
	c := *s
	c.ports = &p
	return &c, nil
}

// letterKind says what a letter is: a dead letter or a rejection.
type letterKind uint8

const (
	deadLetter letterKind = iota
	rejection
)

// publishes reports whether the store publishes letters of kind k.
func (s *Store) publishes(k letterKind) bool {
	return s.ports != nil && (k == deadLetter || s.ports.RejectQueue != "")
}

// send publishes the letter of kind k for job j, whose row was r before
// the letter's transaction changed it (the zero Record when it had none):
// the envelope of the message with j's result.
func (s *Store) send(k letterKind, j *job, r Record) error {
	m := j.message()
	res := j.res
	e := dlq.Envelope{
		Body: m.Body, Original: m.Headers, Reason: res.Reason, Class: string(res.Class), Attempts: res.Attempts,
		Consumer: j.consumer(), OriginalDestination: m.Destination, EventID: m.ID, CorrelationID: m.CorrelationID,
		DeadLetteredAt: s.ports.Clock.Now(),
	}
	if res.Err != nil {
		e.Error = res.Err.Error()
	}
	if r.EventID != "" {
		if r.FirstFailedAt != nil {
			e.FirstFailure = *r.FirstFailedAt
		}
		if r.UpdatedAt != nil && r.Status == inboxkit.StatusTechnicalFailure {
			e.LastFailure = *r.UpdatedAt
		}
		if e.Error == "" {
			e.Error = r.LastError
		}
		if e.Reason == "" {
			e.Reason = r.ReasonCode
		}
	}
	if e.LastFailure.IsZero() {
		e.LastFailure = e.DeadLetteredAt
	}
	if e.FirstFailure.IsZero() {
		e.FirstFailure = e.LastFailure
	}
	p, dest, what := s.ports.DeadLetters, s.ports.DeadLetterQueue, "dead-letter queue"
	if k == rejection {
		e.FirstFailure, e.LastFailure = time.Time{}, time.Time{} // a rejection's envelope has no failures
		p, dest, what = s.ports.Rejects, s.ports.RejectQueue, "reject queue"
	}
	if err := p.Publish(j.ctx, dest, e.Headers(), e.Body); err != nil {
		return fmt.Errorf("inbox: publish to %s %s: %w", what, dest, err)
	}
	if k == deadLetter {
		failpoint.Hit(failpoint.AfterDLQPublishBeforeMark) // no-op unless built with -tags failpoints
	}
	return nil
}
