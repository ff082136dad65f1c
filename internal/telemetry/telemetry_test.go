package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/strata-mem/strata/internal/testenv"
)

func TestOperation(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"SELECT 1":                      "SELECT",
		"  with x AS (SELECT 1) SELECT": "WITH",
		"-- note\nINSERT INTO t VALUES": "INSERT",
		"(SELECT 1) UNION (SELECT 2)":   "SELECT",
		"begin":                         "BEGIN",
		"":                              "SQL",
	} {
		require.Equal(t, want, operation(sql), sql)
	}
}

func TestConfigured(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	require.False(t, Configured(env()))
	require.True(t, Configured(env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")))
	require.True(t, Configured(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")))
	require.False(t, Configured(env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_SDK_DISABLED", "true")))
	require.False(t, Configured(env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_TRACES_EXPORTER", "none")))
	tel, err := Setup(context.Background(), env(), slog.Default())
	require.NoError(t, err)
	require.False(t, tel.Enabled())
	require.NoError(t, tel.Shutdown(context.Background()))
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	log.InfoContext(ctx, "traced")
	log.Info("untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `"trace_id":"0af7651916cd43dd8448eb211c80319c"`)
	require.Contains(t, lines[0], `"span_id":"b7ad6b7169203331"`)
	require.NotContains(t, lines[1], "trace_id")
}

type countTracer struct{ starts, ends, batches int }

func (c *countTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.starts++
	return ctx
}
func (c *countTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) { c.ends++ }

type countBatchTracer struct{ countTracer }

func (c *countBatchTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches++
	return ctx
}
func (c *countBatchTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *countBatchTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func TestMultiTracer(t *testing.T) {
	t.Parallel()
	require.Nil(t, MultiTracer(nil, nil))
	a := &countTracer{}
	require.Same(t, a, MultiTracer(nil, a))
	b := &countBatchTracer{}
	m := MultiTracer(a, b)
	ctx := m.TraceQueryStart(context.Background(), nil, pgx.TraceQueryStartData{SQL: "SELECT 1"})
	m.TraceQueryEnd(ctx, nil, pgx.TraceQueryEndData{})
	bt, ok := m.(pgx.BatchTracer)
	require.True(t, ok)
	bt.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{})
	require.Equal(t, 1, a.starts)
	require.Equal(t, 1, a.ends)
	require.Equal(t, 1, b.starts)
	require.Equal(t, 1, b.batches)
}

func TestQueryText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "SELECT a, b FROM t WHERE x = $1 AND y = '  two\n lines'",
		queryText("\n\t\tSELECT a,\n\t\t       b\n\t\tFROM t  WHERE x = $1\n\t\t  AND y = '  two\n lines'\n"))
	require.Equal(t, "SELECT 1", queryText("SELECT 1"))
	s := statement("SELECT\n  1")
	require.Same(t, s, statement("SELECT\n  1"), "one distinct SQL text is prepared once")
	require.Equal(t, "pg SELECT", s.name)
}

func TestBatchLimits(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	require.Len(t, batchLimits(env(nil)), 2)
	require.Len(t, batchLimits(env(map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "100"})), 0, "a queue set alone keeps the SDK's export size")
	require.Len(t, batchLimits(env(map[string]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100"})), 1)
}

// withRecorder installs a tracer provider recording every ended span for the test (and the
// previous provider back after it). Not parallel: the provider is global.
func withRecorder(t testing.TB) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	return rec, tp
}

// TestPgxTracerSpans: a statement sent alone is a client span; a batch is one client span
// with an event per statement (the SQL text, never the arguments); a failure records the
// SQLSTATE, not the error's text; outside a trace nothing is recorded.
func TestPgxTracerSpans(t *testing.T) {
	rec, tp := withRecorder(t)
	var tr PgxTracer
	const secret = "subject-7f3a"

	tr.TraceQueryEnd(tr.TraceQueryStart(context.Background(), nil, pgx.TraceQueryStartData{SQL: "SELECT 1"}), nil, pgx.TraceQueryEndData{})
	require.Empty(t, rec.Ended(), "a statement outside any trace")

	ctx, root := tp.Tracer("t").Start(context.Background(), "root")
	qctx := tr.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "SELECT x\n\t\tFROM t WHERE id = $1", Args: []any{secret}})
	tr.TraceQueryEnd(qctx, nil, pgx.TraceQueryEndData{})

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("INSERT INTO t VALUES ($1)", secret)
	b.Queue("COMMIT")
	bctx := tr.TraceBatchStart(ctx, nil, pgx.TraceBatchStartData{Batch: b})
	tr.TraceBatchQuery(bctx, nil, pgx.TraceBatchQueryData{SQL: "BEGIN"})
	tr.TraceBatchQuery(bctx, nil, pgx.TraceBatchQueryData{SQL: "INSERT INTO t VALUES ($1)", Args: []any{secret},
		Err: &pgconn.PgError{Code: "23505", Message: "duplicate key " + secret}})
	tr.TraceBatchQuery(bctx, nil, pgx.TraceBatchQueryData{SQL: "COMMIT"})
	tr.TraceBatchEnd(bctx, nil, pgx.TraceBatchEndData{})
	root.End()

	spans := rec.Ended()
	require.Len(t, spans, 3, "the statement, the batch and the root")
	q, batch := spans[0], spans[1]
	require.Equal(t, "pg SELECT", q.Name())
	require.Equal(t, trace.SpanKindClient, q.SpanKind())
	require.Equal(t, root.SpanContext().SpanID(), q.Parent().SpanID())
	require.Contains(t, q.Attributes(), attribute.String("db.query.text", "SELECT x FROM t WHERE id = $1"))
	require.Contains(t, q.Attributes(), attribute.String("db.system.name", "postgresql"))

	require.Equal(t, "pg batch", batch.Name())
	require.Equal(t, root.SpanContext().SpanID(), batch.Parent().SpanID())
	require.Contains(t, batch.Attributes(), attribute.Int("db.operation.batch.size", 3))
	require.Equal(t, codes.Error, batch.Status().Code)
	var names []string
	for _, e := range batch.Events() {
		names = append(names, e.Name)
	}
	require.Equal(t, []string{"pg BEGIN", "pg INSERT", "pg COMMIT"}, names)
	require.Contains(t, batch.Events()[1].Attributes, attribute.String("db.response.status_code", "23505"))
	require.Contains(t, batch.Events()[1].Attributes, attribute.String("db.query.text", "INSERT INTO t VALUES ($1)"))
	require.Len(t, batch.Events()[2].Attributes, 1, "the failure's attribute stays on its own event")
	for _, sp := range spans {
		require.NotContains(t, fmt.Sprint(sp.Attributes(), sp.Events(), sp.Status()), secret)
	}
}

// TestRedisHookSpans, on the real Redis: a command is a client span named by the command, a
// pipeline one span naming its commands; keys and values are in no span; a missing key is
// no error; outside a trace nothing is recorded.
func TestRedisHookSpans(t *testing.T) {
	rec, tp := withRecorder(t)
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(RedisHook{})
	key := "strata-test:otel:" + testenv.RandomID(8)
	t.Cleanup(func() { rdb.Del(context.Background(), key) })

	require.NoError(t, rdb.Set(context.Background(), key, "v", 0).Err())
	require.Empty(t, rec.Ended(), "a command outside any trace")

	ctx, root := tp.Tracer("t").Start(context.Background(), "root")
	require.ErrorIs(t, rdb.Get(ctx, key+":missing").Err(), redis.Nil)
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "secret-value", 0)
		p.Expire(ctx, key, time.Minute)
		return nil
	})
	require.NoError(t, err)
	root.End()

	var spans []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() { // not a new connection's handshake (HELLO, CLIENT SETINFO)
		if sp.Name() != "redis HELLO" && !slices.Contains(sp.Attributes(), attribute.StringSlice("strata.redis.commands", []string{"CLIENT", "CLIENT"})) {
			spans = append(spans, sp)
		}
	}
	require.Len(t, spans, 3)
	require.Equal(t, "redis GET", spans[0].Name())
	require.Equal(t, codes.Unset, spans[0].Status().Code, "a missing key is not a failure")
	require.Equal(t, "redis pipeline", spans[1].Name())
	require.Contains(t, spans[1].Attributes(), attribute.StringSlice("strata.redis.commands", []string{"SET", "EXPIRE"}))
	for _, sp := range spans[:2] {
		require.Equal(t, trace.SpanKindClient, sp.SpanKind())
		require.Equal(t, root.SpanContext().SpanID(), sp.Parent().SpanID())
		require.NotContains(t, fmt.Sprint(sp.Attributes()), key)
		require.NotContains(t, fmt.Sprint(sp.Attributes()), "secret-value")
	}
}
