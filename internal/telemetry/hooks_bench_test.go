package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/strata-mem/strata/internal/telemetry"
)

// BenchmarkTracerHooks is what the hooks cost per Postgres round trip and per Redis
// command: the spans made on the request's goroutine, then batched and exported over
// OTLP/HTTP (protobuf) to a sink that discards, each round's export flushed inside the
// timing. Its allocs/op (the whole process's) are the deterministic figure; timing on a
// shared machine is not. "batch8" is the shape of /v1/context's batches: BEGIN, SET LOCAL
// and six statements.
func BenchmarkTracerHooks(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(sink.Close)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(8192), sdktrace.WithMaxExportBatchSize(1024)))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()); otel.SetTracerProvider(prev) })
	// flush exports what is queued: every 512 rounds (fewer spans than the queue holds, so
	// none is dropped) and at the end.
	var rounds int
	flush := func(always bool) {
		if rounds++; always || rounds%512 == 0 {
			if err := tp.ForceFlush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
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
			flush(false)
		}
		flush(true)
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
			flush(false)
		}
		flush(true)
	})
	b.Run("redis", func(b *testing.B) {
		process := telemetry.RedisHook{}.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
		cmd := redis.NewStringCmd(ctx, "evalsha", "0123", 1, "k")
		b.ReportAllocs()
		for b.Loop() {
			_ = process(ctx, cmd)
			flush(false)
		}
		flush(true)
	})
}
