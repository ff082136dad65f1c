package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of every span Strata makes.
const Name = "github.com/strata-mem/strata"

// Telemetry is the tracing a server runs with; the zero value (and nil) is tracing off.
type Telemetry struct {
	tp *sdktrace.TracerProvider
}

// Enabled reports whether spans are recorded and exported.
func (t *Telemetry) Enabled() bool { return t != nil && t.tp != nil }

// Shutdown flushes the spans still queued and stops the exporter (the last step of the
// ordered shutdown, after the workers have stopped). Off: nothing.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Configured reports whether getenv names an OTLP endpoint for traces and the SDK is not
// disabled (OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off).
func Configured(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup builds the tracer provider when Configured, and installs it and the W3C trace
// context propagator as OpenTelemetry's globals. Everything else — endpoint, headers,
// protocol details, timeouts, the sampler (OTEL_TRACES_SAMPLER, default parentbased_always_on),
// the batch processor's delays, the service name and resource attributes — is read from
// the process environment by the SDK itself (the batch processor's queue and export sizes
// default to Strata's, batchLimits). OTEL_EXPORTER_OTLP_PROTOCOL (or
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) picks http/protobuf (default) or grpc.
//
// The SDK's own errors (an unreachable collector, a full queue) go to log at WARN.
func Setup(ctx context.Context, getenv func(string) string, log *slog.Logger) (*Telemetry, error) {
	if !Configured(getenv) {
		return &Telemetry{}, nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("OpenTelemetry", "err", err)
	}))
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (http/protobuf or grpc)", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry: OTLP exporter: %w", err)
	}
	// The default service name first: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// (WithFromEnv, later) override it.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "strata")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OpenTelemetry: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batchLimits(os.Getenv)...), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Telemetry{tp: tp}, nil
}

// Strata's defaults for the batch span processor, where the SDK's (a queue of 2048 spans,
// exports of 512) are for a process making far fewer spans: POST /v1/context makes about a
// dozen, so at a few hundred calls a second the SDK's queue holds well under a second of
// spans, and a collector that is slow for a moment costs spans. The queue is what a span
// costs the request: ending one is a non-blocking send to it (a full queue drops the span,
// never waits); the export (protobuf encoding, the HTTP or gRPC round trip) runs on the
// processor's own goroutine.
const (
	defaultMaxQueueSize       = 8192
	defaultMaxExportBatchSize = 1024
)

// batchLimits is Strata's defaults for the limits the environment (read by the SDK from the
// process's, as getenv does) leaves unset. A queue size set alone keeps the SDK's export
// size (at most the queue).
func batchLimits(getenv func(string) string) []sdktrace.BatchSpanProcessorOption {
	var opts []sdktrace.BatchSpanProcessorOption
	queueSet := getenv("OTEL_BSP_MAX_QUEUE_SIZE") != ""
	if !queueSet {
		opts = append(opts, sdktrace.WithMaxQueueSize(defaultMaxQueueSize))
	}
	if !queueSet && getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") == "" {
		opts = append(opts, sdktrace.WithMaxExportBatchSize(defaultMaxExportBatchSize))
	}
	return opts
}

// tracer is Strata's tracer from the global provider. The provider is read per span (a
// server's is installed after package init, and tests run several in turn); the tracer is
// cached for it, since the SDK's lookup takes a lock and a map probe on every span.
func tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if c := cachedTracer.Load(); c != nil && c.tp == tp {
		return c.t
	}
	t := tp.Tracer(Name)
	cachedTracer.Store(&providerTracer{tp: tp, t: t})
	return t
}

type providerTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

var cachedTracer atomic.Pointer[providerTracer]
