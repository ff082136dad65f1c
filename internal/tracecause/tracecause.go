// Package tracecause names the cause of work done later: a request's W3C traceparent,
// recorded when the request asks for work that is queued afterwards (extraction), and the
// River job metadata that carries it. It is a leaf (it imports only OpenTelemetry's trace
// API), so tiers and the transport can use it without importing internal/telemetry, which
// only app installs (docs/architecture.md, docs/observability.md).
package tracecause

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/trace"
)

// MetadataKey is the River job metadata key that holds the trace context of the job's
// cause (internal/telemetry's RiverMiddleware reads and writes it).
const MetadataKey = "otel"

// Traceparent is ctx's span context as a W3C traceparent, "" outside a trace: what a request
// records for a job that will be queued on its behalf later (JobMetadata).
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// JobMetadata is River job metadata (InsertOpts.Metadata) naming traceparent (Traceparent)
// as the job's cause; nil when traceparent is empty.
func JobMetadata(traceparent string) []byte {
	if traceparent == "" {
		return nil
	}
	b, _ := json.Marshal(map[string]map[string]string{MetadataKey: {"traceparent": traceparent}})
	return b
}
