package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/dlq"
)

// ErrNoSubject is returned by Receive on an Adapter opened without
// Config.Subject (a publisher-only Adapter).
var ErrNoSubject = errors.New("jetstream: no Config.Subject: publisher-only adapter")

// ErrSubjectTaken is wrapped by Open's error when Config.Subject is held
// by a work-queue stream whose other durable consumer already reads it: a
// work-queue stream gives each message to one consumer, so it refuses a
// second durable on the same subject.
var ErrSubjectTaken = errors.New("jetstream: another durable consumer reads this subject of a work-queue stream")

var (
	_ consumer.Source = (*Adapter)(nil)
	_ dlq.Publisher   = (*Adapter)(nil)
)

// Adapter is a NATS JetStream consumer.Source for one subject, read through
// a durable pull consumer, and a dlq.Publisher. It holds one NATS
// connection, which nats.go reconnects forever. All methods are safe for
// concurrent use.
type Adapter struct {
	cfg  Config
	url  string // redacted
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer // nil without Config.Subject

	retention jetstream.RetentionPolicy // of Config.Stream, with Config.Subject

	closedCtx context.Context // done after Close
	close     context.CancelFunc
	closeOnce sync.Once

	mu      sync.Mutex
	closing bool                   // set by Close, under mu
	pending map[*delivery]struct{} // received, not settled

	// orphans holds the pull requests whose Receive gave up (its ctx was
	// done) before the server answered. The next Receive waits for one of
	// them before it asks again, so a message the server sent meanwhile is
	// returned, in the order it was sent, not left until AckWait.
	orphans chan chan pulled
}

// pulled is the answer to one pull request: a delivery, or none (err nil
// when the request expired empty).
type pulled struct {
	d   *delivery
	err error
}

// Open connects to the server, makes sure Config.Stream captures
// Config.Subject, creates or updates the durable pull consumer and returns
// the Adapter. ctx bounds this setup.
func Open(ctx context.Context, cfg Config) (*Adapter, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Adapter{
		cfg:     cfg,
		url:     redact(cfg.URL),
		pending: make(map[*delivery]struct{}),
		orphans: make(chan chan pulled, 64),
	}
	log := cfg.Logger
	nc, err := nats.Connect(cfg.URL,
		nats.Name(cfg.ConnectionName),
		nats.Timeout(cfg.DialTimeout),
		nats.PingInterval(cfg.PingInterval),
		nats.MaxPingsOutstanding(3),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(cfg.backoff),
		// No buffering while disconnected: an Ack, Requeue or Publish that
		// returns an error was not sent, and cannot take effect later.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("jetstream: disconnected", "url", a.url, "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			log.Info("jetstream: reconnected", "url", a.url)
		}),
	)
	if err != nil {
		return nil, &redactedError{
			msg: fmt.Sprintf("jetstream: connect to %s: %s", a.url, hidePassword(cfg.URL, err.Error())),
			err: err,
		}
	}
	a.nc = nc
	if a.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.Subject != "" {
		retention := jetstream.WorkQueuePolicy
		if cfg.KeepAcked {
			retention = jetstream.LimitsPolicy
		}
		got, err := a.ensureStream(ctx, cfg.Stream, retention, cfg.Subject)
		if err != nil {
			nc.Close()
			return nil, err
		}
		a.retention = got
		if got != jetstream.WorkQueuePolicy && !cfg.KeepAcked {
			log.Warn("jetstream: the stream keeps acknowledged messages: a durable consumer under a new name reads every message it still holds",
				"stream", cfg.Stream, "subject", cfg.Subject, "retention", retentionName(got), "durable", cfg.Durable,
				"fix", "a stream for inboxkit is a work-queue stream (inboxkit creates it so); keep the consumer name, or move the subject to a work-queue stream")
		}
		a.cons, err = a.js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
			Durable:       cfg.Durable,
			FilterSubject: cfg.Subject,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxDeliver:    -1,
			MaxAckPending: cfg.Prefetch,
		})
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == errWQConsumerNotUnique || apiErr.ErrorCode == errWQMultipleUnfiltered) {
			nc.Close()
			return nil, fmt.Errorf("%w: create consumer %s on stream %s: %w; keep the consumer name that reads %s, or delete the durable that is no longer used (nats consumer rm %s NAME)",
				ErrSubjectTaken, cfg.Durable, cfg.Stream, err, cfg.Subject, cfg.Stream)
		}
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("jetstream: create consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
		}
	}
	a.closedCtx, a.close = context.WithCancel(context.Background())
	return a, nil
}

// Receive returns the next delivery of Config.Subject. It blocks until a
// delivery arrives, ctx is done (ctx.Err()) or the Adapter is closed
// (consumer.ErrClosed). It pulls one message per request, each request
// waiting up to Config.PollWait on the server, so it keeps working across
// reconnects: a request lost with a connection is replaced by the next. A
// Receive whose ctx ends while its request waits leaves the request to the
// next Receive, which returns what it brings before it asks again: a
// message is never held back until AckWait because a receive gave up.
func (a *Adapter) Receive(ctx context.Context) (consumer.Delivery, error) {
	if a.cons == nil {
		return nil, ErrNoSubject
	}
	for {
		if a.closedCtx.Err() != nil {
			return nil, consumer.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var res chan pulled
		select {
		case res = <-a.orphans:
		default:
			res = a.pull()
		}
		var r pulled
		select {
		case r = <-res:
		case <-ctx.Done():
			a.orphan(res)
			return nil, ctx.Err()
		case <-a.closedCtx.Done():
			return nil, consumer.ErrClosed // a late delivery is Nak'd (track, Close)
		}
		switch {
		case r.d != nil:
			return r.d, nil
		case a.closedCtx.Err() != nil:
			return nil, consumer.ErrClosed
		case r.err == nil, errors.Is(r.err, context.DeadlineExceeded):
			// The pull request expired empty: ask again.
		default:
			a.cfg.Logger.Warn("jetstream: pull failed, retrying", "stream", a.cfg.Stream, "consumer", a.cfg.Durable, "err", r.err)
			select {
			case <-ctx.Done():
			case <-a.closedCtx.Done():
			case <-time.After(a.cfg.Reconnect.Initial):
			}
		}
	}
}

// pull sends one pull request for one message, waiting up to PollWait on
// the server, bounded by Close but not by any Receive's ctx: a message the
// server sends after the Receive gave up is still taken in (and tracked).
func (a *Adapter) pull() chan pulled {
	res := make(chan pulled, 1)
	go func() {
		fctx, cancel := context.WithTimeout(a.closedCtx, a.cfg.PollWait)
		defer cancel()
		batch, err := a.cons.Fetch(1, jetstream.FetchContext(fctx))
		if err != nil {
			res <- pulled{err: err}
			return
		}
		for msg := range batch.Messages() {
			res <- pulled{d: a.track(msg)} // nil when closing: Nak'd
			return
		}
		res <- pulled{err: batch.Error()}
	}()
	return res
}

// orphan keeps the pull request res for the next Receive; with too many
// kept, its message (if one comes) is handed back.
func (a *Adapter) orphan(res chan pulled) {
	select {
	case a.orphans <- res:
	default:
		go func() {
			if r := <-res; r.d != nil && r.d.settled.CompareAndSwap(false, true) {
				a.forget(r.d)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = r.d.nak(ctx, 0)
			}
		}()
	}
}

// Publish sends body with headers to subject and returns nil only after the
// stream that captures subject acknowledged it (a JetStream PubAck). For a
// subject no stream captures it creates the stream StreamName(subject)
// (file storage, work-queue retention, as Open creates it), or adds the
// subject to it, and publishes again; with Config.NoStreamCreation that is an error
// (jetstream.ErrNoStreamResponse). A "Nats-Msg-Id" header enables the
// server's duplicate detection for retried publishes. Without a deadline in
// ctx the wait for the PubAck is bounded by 5s.
func (a *Adapter) Publish(ctx context.Context, subject string, headers map[string]string, body []byte) error {
	if a.closedCtx.Err() != nil {
		return fmt.Errorf("jetstream: publish to %s: %w", subject, consumer.ErrClosed)
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: make(nats.Header, len(headers))}
	for k, v := range headers {
		msg.Header[k] = []string{v} // as given: nats.Header.Set would canonicalize
	}
	_, err := a.js.PublishMsg(ctx, msg)
	if errors.Is(err, jetstream.ErrNoStreamResponse) && !a.cfg.NoStreamCreation {
		// Nothing stored the message (no stream answered): create its
		// stream, a work-queue stream as Open would, and send it again.
		if err := a.EnsureStream(ctx, StreamName(subject), subject); err != nil {
			return fmt.Errorf("jetstream: publish to %s: no stream captures it, and creating one failed: %w", subject, err)
		}
		_, err = a.js.PublishMsg(ctx, msg)
	}
	if err != nil {
		return fmt.Errorf("jetstream: publish to %s: %w", subject, err)
	}
	return nil
}

// Ready returns nil while the connection to the server is up, and
// otherwise an error saying its state and the last error (a readiness
// check: see consumer.Readier). It does not block.
func (a *Adapter) Ready(context.Context) error {
	if a.closedCtx.Err() != nil {
		return fmt.Errorf("jetstream: %w", consumer.ErrClosed)
	}
	if st := a.nc.Status(); st != nats.CONNECTED {
		msg := fmt.Sprintf("jetstream: not connected to %s (%s)", a.url, st)
		err := a.nc.LastError()
		if err == nil {
			return errors.New(msg)
		}
		return &redactedError{msg: msg + ": " + hidePassword(a.cfg.URL, err.Error()), err: err}
	}
	return nil
}

// Prefetch returns Config.Prefetch, the durable consumer's MaxAckPending
// (shared by every process consuming it), or 0 when it is unlimited
// (consumer.Prefetcher).
func (a *Adapter) Prefetch() int { return max(a.cfg.Prefetch, 0) }

// Depth returns the number of messages on subject that the stream
// capturing it holds: for a limits-retention stream (a dead-letter
// stream) every message not purged, for a work-queue stream the messages
// not yet acknowledged. A subject no stream captures has depth 0.
func (a *Adapter) Depth(ctx context.Context, subject string) (int, error) {
	name, err := a.js.StreamNameBySubject(ctx, subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jetstream: stream of %s: %w", subject, err)
	}
	s, err := a.js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("jetstream: look up stream %s: %w", name, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("jetstream: stream %s info: %w", name, err)
	}
	return int(info.State.Subjects[subject]), nil
}

// EnsureStream makes sure stream name exists and captures subjects, so that
// Publish to them is stored (DLQ and reject subjects). A missing stream is
// created with file storage and work-queue retention, as every stream the
// Adapter creates: a message stays until a consumer acknowledges it (a dead
// letter until it is replayed or dropped), and a durable consumer under a
// new name does not read again what another one acknowledged. An existing
// stream keeps its settings; the subjects it does not capture yet are
// added to it.
func (a *Adapter) EnsureStream(ctx context.Context, name string, subjects ...string) error {
	_, err := a.ensureStream(ctx, name, jetstream.WorkQueuePolicy, subjects...)
	return err
}

// ensureStream is EnsureStream with the retention of a stream it creates;
// it returns the retention of the stream, found or created, and logs a
// stream it created.
func (a *Adapter) ensureStream(ctx context.Context, name string, retention jetstream.RetentionPolicy, subjects ...string) (jetstream.RetentionPolicy, error) {
	if len(subjects) == 0 {
		return 0, fmt.Errorf("jetstream: ensure stream %s: no subjects", name)
	}
	for range 3 { // a concurrent creator may win the race
		s, err := a.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = a.js.CreateStream(ctx, jetstream.StreamConfig{
				Name:      name,
				Subjects:  subjects,
				Storage:   jetstream.FileStorage,
				Retention: retention,
				Replicas:  a.cfg.Replicas,
			})
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				continue
			}
			if err != nil && a.cfg.Replicas > 1 {
				return 0, fmt.Errorf("jetstream: create stream %s with %d replicas: %w (a stream has at most as many replicas as the JetStream cluster has nodes, and 1 on a single server: connect to a cluster, or lower ?replicas=)", name, a.cfg.Replicas, err)
			}
			if err != nil {
				return 0, fmt.Errorf("jetstream: create stream %s: %w", name, err)
			}
			a.cfg.Logger.Info("jetstream: created stream", "stream", name, "subjects", subjects, "retention", retentionName(retention), "storage", "file", "replicas", a.cfg.Replicas)
			return retention, nil
		}
		if err != nil {
			return 0, fmt.Errorf("jetstream: look up stream %s: %w", name, err)
		}
		cfg := s.CachedInfo().Config
		if r := max(cfg.Replicas, 1); r < a.cfg.Replicas {
			a.cfg.Logger.Warn("jetstream: the stream has fewer replicas than asked for; an existing stream keeps its settings",
				"stream", name, "replicas", r, "asked", a.cfg.Replicas,
				"fix", fmt.Sprintf("nats stream edit %s --replicas %d (or delete the stream when it is empty)", name, a.cfg.Replicas))
		}
		added := false
		for _, subj := range subjects {
			if !slices.ContainsFunc(cfg.Subjects, func(p string) bool { return subjectMatches(p, subj) }) {
				cfg.Subjects = append(cfg.Subjects, subj)
				added = true
			}
		}
		if !added {
			return cfg.Retention, nil
		}
		if _, err := a.js.UpdateStream(ctx, cfg); err != nil {
			return 0, fmt.Errorf("jetstream: add subjects %v to stream %s: %w", subjects, name, err)
		}
		return cfg.Retention, nil
	}
	return 0, fmt.Errorf("jetstream: ensure stream %s: %w", name, jetstream.ErrStreamNameAlreadyInUse)
}

// Work-queue errors of the JetStream API: a second durable consumer on a
// subject another one reads, or a second one without a filter.
const (
	errWQConsumerNotUnique  jetstream.ErrorCode = 10100
	errWQMultipleUnfiltered jetstream.ErrorCode = 10099
)

// retentionName names a retention policy as the docs do.
func retentionName(r jetstream.RetentionPolicy) string {
	switch r {
	case jetstream.WorkQueuePolicy:
		return "work-queue"
	case jetstream.LimitsPolicy:
		return "limits"
	case jetstream.InterestPolicy:
		return "interest"
	}
	return r.String()
}

// Close stops intake, returns every delivery not yet settled to the server
// with a Nak (so it is redelivered at once, not after AckWait), deletes a
// Config.Transient durable, and closes the connection. Receive and Publish return consumer.ErrClosed afterwards.
// Close is safe to call more than once.
func (a *Adapter) Close() error {
	a.closeOnce.Do(func() {
		a.close()
		a.mu.Lock()
		a.closing = true
		pending := a.pending
		a.pending = make(map[*delivery]struct{})
		a.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var wg sync.WaitGroup
		for d := range pending {
			if d.settled.CompareAndSwap(false, true) {
				wg.Go(func() { _ = d.nak(ctx, 0) })
			}
		}
		wg.Wait()
		cancel()
		if a.cfg.Transient && a.cons != nil && a.retention == jetstream.WorkQueuePolicy {
			// A time of its own, not what the Naks left of theirs: a durable
			// that survives keeps every delivery the Naks did not reach
			// until AckWait, and the next reader under its name gets the
			// rest in the order the Naks arrived.
			dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := a.js.DeleteConsumer(dctx, a.cfg.Stream, a.cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				a.cfg.Logger.Warn("jetstream: delete the transient durable consumer", "stream", a.cfg.Stream, "durable", a.cfg.Durable, "err", err)
			}
			dcancel()
		}
		a.drain()
	})
	return nil
}

// drain closes the connection once the server has dropped its interest in
// every subscription: Drain unsubscribes them all, flushes (the server
// answers the flush after the unsubscriptions), sends what is still
// buffered (the Naks) and closes. The server hands a message to a waiting
// pull request only while the request's inbox has interest, so a message
// published after Close returned goes to the next reader; after a bare
// Close, which the server learns of in its own time, it could go to a pull
// request of this adapter that a Receive gave up on, and come back only
// after AckWait, redelivered.
func (a *Adapter) drain() {
	closed := make(chan struct{})
	var once sync.Once
	a.nc.SetClosedHandler(func(*nats.Conn) { once.Do(func() { close(closed) }) })
	if err := a.nc.Drain(); err != nil { // closed already, or reconnecting
		a.nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(drainWait):
		a.nc.Close()
	}
}

// drainWait bounds Close's drain (a server that stopped answering).
const drainWait = 2 * time.Second

// track registers a received message, or naks it and returns nil when the
// Adapter is closing.
func (a *Adapter) track(msg jetstream.Msg) *delivery {
	d := newDelivery(a, msg)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		_ = msg.Nak()
		return nil
	}
	a.pending[d] = struct{}{}
	return d
}

func (a *Adapter) forget(d *delivery) {
	a.mu.Lock()
	delete(a.pending, d)
	a.mu.Unlock()
}

// subjectMatches reports whether subject is captured by pattern, a subject
// with optional '*' (one token) and '>' (one or more tokens) wildcards. A
// wildcard subject is captured only by a pattern covering it.
func subjectMatches(pattern, subject string) bool {
	pt := strings.Split(pattern, ".")
	st := strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if p != "*" && p != st[i] {
			return false
		}
		if p == "*" && st[i] == ">" {
			return false
		}
	}
	return len(pt) == len(st)
}

// redactedError carries an error whose text had a password removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
