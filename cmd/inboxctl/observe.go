package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/inbox"
	"github.com/inboxkit/inboxkit/observe"
	"github.com/inboxkit/inboxkit/observe/otlp"
)

// ops is what `run` offers operators: metrics, health, traces.
type ops struct {
	obs    *observe.Observer
	health *observe.Health
	srv    *http.Server
	stop   func()
}

// startOps creates the observer (always: traces need it too) and, when addr
// is set, serves /metrics, /healthz and /readyz there and refreshes the
// inbox gauges. Readiness turns false when ctx is done (the drain).
func startOps(ctx context.Context, addr, name string, st *inbox.Store, b *broker, logger *slog.Logger) (*ops, error) {
	shutdownTraces, traced, err := otlp.Setup(ctx, "inboxctl")
	if err != nil {
		return nil, usageErr("traces: %v\n\tcheck the OTEL_EXPORTER_OTLP_* variables", err)
	}
	obs, err := observe.New(observe.Config{Consumer: name, Store: st, Logger: logger})
	if err != nil {
		shutdownTraces(context.Background())
		return nil, err
	}
	o := &ops{obs: obs, health: observe.NewHealth()}
	o.health.Add("database", st.CheckReady)
	o.health.Add("broker", b.reachable)
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.stop = func() {
		cancel()
		if o.srv != nil {
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			_ = o.srv.Shutdown(sctx)
			c()
		}
		fctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_ = shutdownTraces(fctx)
		c()
	}
	if traced {
		logger.Info("exporting traces with OTLP", "consumer", name)
	}
	go func() {
		select {
		case <-ctx.Done():
			o.health.SetDraining()
		case <-bg.Done():
		}
	}()
	if addr == "" {
		return o, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		o.stop()
		return nil, usageErr("--metrics-addr %s: %v\n\tuse a free host:port, e.g. 127.0.0.1:9464", addr, err)
	}
	o.srv = &http.Server{Handler: observe.Mux(obs, o.health), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	go obs.RunInboxStats(bg)
	logger.Info("serving metrics and health", "consumer", name, "addr", ln.Addr().String(),
		"metrics", "http://"+ln.Addr().String()+"/metrics", "readyz", "http://"+ln.Addr().String()+"/readyz")
	return o, nil
}

// reachable tells whether the broker accepts TCP connections: the /readyz
// check "broker". The consumer's own connection repairs itself; this says
// whether it can.
func (b *broker) reachable(ctx context.Context) error {
	addr := b.t.Addr
	switch b.t.Kind {
	case target.AMQP, target.NATS, target.Embedded:
		raw := b.t.URL
		if b.t.Kind == target.Embedded {
			raw = b.natsURL
		}
		u, err := url.Parse(strings.Split(raw, ",")[0])
		if err != nil {
			return fmt.Errorf("broker URL: %w", err)
		}
		addr = u.Host
		if u.Port() == "" {
			port := "4222"
			if b.t.Kind == target.AMQP {
				port = "5672"
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
	}
	if addr == "" {
		return errors.New("no broker address")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("broker %s unreachable: %w", b.t.Display, err)
	}
	return c.Close()
}

// parseLevel reads --log-level.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usageErr("--log-level %q: use debug (a line per message), info (a summary line per minute), warn or error", s)
	}
	return l, nil
}
