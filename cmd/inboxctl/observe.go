package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

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
		_ = shutdownTraces(context.Background()) // nothing was traced yet
		return nil, err
	}
	o := &ops{obs: obs, health: observe.NewHealth()}
	o.health.Add("database", st.CheckReady)
	o.health.Add("broker", b.ready)
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

// parseLevel reads --log-level.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usageErr("--log-level %q: use debug (a line per message), info (a summary line per minute), warn or error", s)
	}
	return l, nil
}
