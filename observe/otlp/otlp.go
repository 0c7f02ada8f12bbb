// Package otlp installs an OpenTelemetry trace exporter (OTLP over HTTP)
// when the standard OTEL_* environment variables ask for one, and nothing
// otherwise. It is a package of its own so that programs which do not export
// traces do not link the exporter.
package otlp

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled tells whether the environment asks for OTLP trace export:
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
// OTEL_TRACES_EXPORTER is unset or "otlp", and OTEL_SDK_DISABLED is not
// "true".
func Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs, when Enabled, a global tracer provider exporting with
// OTLP/HTTP as the OTEL_* variables configure it (endpoint, headers,
// timeout; OTEL_SERVICE_NAME, default serviceName) and the W3C trace
// context propagator. It returns a shutdown function that flushes the
// spans (a no-op when nothing was installed) and whether it installed one.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, enabled bool, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, false, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("otlp: trace exporter: %w", err)
	}
	attrs := resource.Environment()
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		attrs, _ = resource.Merge(resource.NewSchemaless(attribute.String("service.name", serviceName)), attrs)
	}
	res, err := resource.Merge(resource.Default(), attrs)
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, true, nil
}
