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

	"github.com/strata-mem/strata/internal/tracecause"
)

// Job metadata keys: metadataKey holds the trace context of the job's cause — the request
// (or job) that queued it: the inserter's, unless the enqueuer named another (tracecause.JobMetadata);
// inserterKey the inserter's when the enqueuer named the cause.
const (
	metadataKey = tracecause.MetadataKey
	inserterKey = "otel_inserter"
)

// RiverMiddleware carries trace context through River: inserting a job records the
// inserter's context (traceparent) in the job's metadata, and working it makes a consumer
// span — a root of its own, linked to the inserter's span, since a job may run long after
// (and more than once after) the request that queued it finished. A job queued later on a
// request's behalf (extraction: the dispatcher queues a session's job once its turns have
// waited long enough) names that request at insert (tracecause.JobMetadata), and its span links to the
// request and to the inserter. Spans name the job's kind; its args (org, session and user
// ids) are never recorded.
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
				if _, named := meta[metadataKey]; named {
					meta[inserterKey] = map[string]string(carrier)
				} else {
					meta[metadataKey] = map[string]string(carrier)
				}
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
		Otel     map[string]string `json:"otel"`
		Inserter map[string]string `json:"otel_inserter"`
	}
	if len(job.Metadata) > 0 && json.Unmarshal(job.Metadata, &meta) == nil {
		for _, c := range []map[string]string{meta.Otel, meta.Inserter} {
			if len(c) == 0 {
				continue
			}
			linked := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier(c)))
			if linked.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: linked}))
			}
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
