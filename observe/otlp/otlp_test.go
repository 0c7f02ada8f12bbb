package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
)

// Without OTEL_* variables nothing is installed; with an endpoint, spans
// are exported there over OTLP/HTTP.
func TestSetup(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	shutdown, on, err := Setup(context.Background(), "test")
	if err != nil || on {
		t.Fatalf("without OTEL_* variables: enabled %v, err %v", on, err)
	}
	_ = shutdown(context.Background())

	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	prev := otel.GetTracerProvider()
	defer otel.SetTracerProvider(prev)
	shutdown, on, err = Setup(context.Background(), "test")
	if err != nil || !on {
		t.Fatalf("with an endpoint: enabled %v, err %v", on, err)
	}
	_, span := otel.Tracer("t").Start(context.Background(), "span")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no span was exported to the OTLP endpoint")
	}
}
