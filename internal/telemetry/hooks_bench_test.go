package telemetry_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/strata-mem/strata/internal/telemetry"
)

// BenchmarkTracerHooks is what the hooks cost a request per Postgres round trip and per
// Redis command, spans going through the batch processor to an exporter that discards
// (its allocs/op are the deterministic figure: timing on a shared machine is not).
// "batch8" is the shape of /v1/context's batches: BEGIN, SET LOCAL and six statements.
func BenchmarkTracerHooks(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()); otel.SetTracerProvider(prev) })
	ctx, root := tp.Tracer("bench").Start(context.Background(), "root")
	defer root.End()
	const sql = `SELECT m.id, m.text, m.kind, m.created_at
		FROM memories m
		WHERE m.org_id = $1 AND m.user_id = $2 AND m.deleted_at IS NULL
		ORDER BY m.embedding <=> $3 LIMIT $4`
	var tr telemetry.PgxTracer

	b.Run("statement", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tr.TraceQueryEnd(tr.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: sql}), nil, pgx.TraceQueryEndData{})
		}
	})
	b.Run("batch8", func(b *testing.B) {
		batch := &pgx.Batch{}
		stmts := []string{"BEGIN", "SELECT set_config('app.org_id', $1, true)", sql, sql + " ", sql + "  ", sql + "   ", sql + "    ", "COMMIT"}
		for _, s := range stmts {
			batch.Queue(s)
		}
		b.ReportAllocs()
		for b.Loop() {
			bctx := tr.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{Batch: batch})
			for _, s := range stmts {
				tr.TraceBatchQuery(bctx, nil, pgx.TraceBatchQueryData{SQL: s})
			}
			tr.TraceBatchEnd(bctx, nil, pgx.TraceBatchEndData{})
		}
	})
	b.Run("redis", func(b *testing.B) {
		process := telemetry.RedisHook{}.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
		cmd := redis.NewStringCmd(ctx, "evalsha", "0123", 1, "k")
		b.ReportAllocs()
		for b.Loop() {
			_ = process(ctx, cmd)
		}
	})
}
