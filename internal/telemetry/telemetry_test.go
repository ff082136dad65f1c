package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
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
