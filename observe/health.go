package observe

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inboxkit/inboxkit/consumer"
)

// Health answers /healthz and /readyz. Its zero value is not usable: call
// NewHealth. It is safe for concurrent use.
type Health struct {
	mu       sync.Mutex
	checks   []check
	draining atomic.Bool
	// Timeout bounds each check of a /readyz request. Defaults to 3s.
	Timeout time.Duration
}

type check struct {
	name string
	fn   func(context.Context) error
}

// NewHealth returns a Health with no checks: ready until Draining.
func NewHealth() *Health { return &Health{Timeout: 3 * time.Second} }

// Add adds a readiness check (for example "database" with
// inbox.Store.CheckReady). fn must return within its context's deadline.
func (h *Health) Add(name string, fn func(context.Context) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, check{name, fn})
}

// SourceCheck returns a readiness check for src: the connection state it
// reports when it is a consumer.Readier (every adapter in broker/ is), and
// always ready otherwise. Add it as "broker":
//
//	h.Add("broker", observe.SourceCheck(src))
func SourceCheck(src consumer.Source) func(context.Context) error {
	r, ok := src.(consumer.Readier)
	if !ok {
		return func(context.Context) error { return nil }
	}
	return r.Ready
}

// SetDraining marks the consumer as draining (it stopped taking messages):
// /readyz answers 503 from now on.
func (h *Health) SetDraining() { h.draining.Store(true) }

// CheckResult is the result of one readiness check.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready    bool          `json:"ready"`
	Draining bool          `json:"draining"`
	Checks   []CheckResult `json:"checks"`
}

// Ready runs every check (in parallel) and tells whether the consumer is
// ready: all checks pass and it is not draining.
func (h *Health) Ready(ctx context.Context) Readiness {
	h.mu.Lock()
	checks := append([]check(nil), h.checks...)
	h.mu.Unlock()
	r := Readiness{Ready: true, Draining: h.draining.Load(), Checks: make([]CheckResult, len(checks))}
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, h.Timeout)
			defer cancel()
			res := CheckResult{Name: c.name, OK: true}
			if err := c.fn(cctx); err != nil {
				res.OK, res.Error = false, err.Error()
			}
			r.Checks[i] = res
		}()
	}
	wg.Wait()
	for _, c := range r.Checks {
		r.Ready = r.Ready && c.OK
	}
	if r.Draining {
		r.Ready = false
	}
	return r
}

func (h *Health) serveReady(w http.ResponseWriter, req *http.Request) {
	r := h.Ready(req.Context())
	code := http.StatusOK
	if !r.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, r)
}

func serveAlive(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"alive": true})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// Mux serves /metrics (o's registry; nil o: none), /healthz and /readyz
// (h; nil h: always ready).
func Mux(o *Observer, h *Health) *http.ServeMux {
	if o == nil {
		return MuxFor(nil, h)
	}
	return MuxFor(o.cfg.Registry, h)
}

// MuxFor is Mux for a registry without a consumer's Observer (a relay of
// its own: inboxctl relay); nil reg serves no /metrics.
func MuxFor(reg *prometheus.Registry, h *Health) *http.ServeMux {
	if h == nil {
		h = NewHealth()
	}
	mux := http.NewServeMux()
	if reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	}
	mux.HandleFunc("GET /healthz", serveAlive)
	mux.HandleFunc("GET /readyz", h.serveReady)
	return mux
}
