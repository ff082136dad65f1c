package telemetry

import (
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// metadataKey is the job metadata key holding the trace context of the request (or job)
// that queued the job.
const metadataKey = "otel"

// RiverMiddleware carries trace context through River: inserting a job records the
// inserter's context (traceparent) in the job's metadata, and working it makes a consumer
// span — a root of its own, linked to the inserter's span, since a job may run long after
// (and more than once after) the request that queued it finished. Spans name the job's
// kind; its args (org, session and user ids) are never recorded.
type RiverMiddleware struct {
	river.MiddlewareDefaults
}

// InsertMany implements rivertype.JobInsertMiddleware.
func (RiverMiddleware) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams,
	doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		carrier := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(ctx, carrier)
		if len(carrier) > 0 {
			for _, p := range params {
				meta := map[string]any{}
				if len(p.Metadata) > 0 {
					if err := json.Unmarshal(p.Metadata, &meta); err != nil {
						continue // not ours to rewrite
					}
				}
				meta[metadataKey] = map[string]string(carrier)
				if b, err := json.Marshal(meta); err == nil {
					p.Metadata = b
				}
			}
		}
	}
	return doInner(ctx)
}

// Work implements rivertype.WorkerMiddleware.
func (RiverMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(),
		trace.WithAttributes(attribute.String("messaging.system", "river"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.destination.name", job.Queue),
			attribute.String("strata.job.kind", job.Kind), attribute.Int64("strata.job.id", job.ID),
			attribute.Int("strata.job.attempt", job.Attempt))}
	var meta struct {
		Otel map[string]string `json:"otel"`
	}
	if len(job.Metadata) > 0 && json.Unmarshal(job.Metadata, &meta) == nil && len(meta.Otel) > 0 {
		linked := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier(meta.Otel)))
		if linked.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: linked}))
		}
	}
	ctx, span := tracer().Start(ctx, "river.work "+job.Kind, opts...)
	defer span.End()
	err := doInner(ctx)
	if err != nil {
		span.SetStatus(codes.Error, "job failed") // the error text may quote data: not recorded
	}
	return err
}
