package telemetry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer traces what a pool's connections send to Postgres, one client span per round
// trip: a statement sent alone (Query, QueryRow, Exec) is a span of its own, and a batch
// (pgx's pipeline: BEGIN, SET LOCAL, several statements and COMMIT in one round trip) is one
// span with one event per statement, in the order pgx read their results. An event, not a
// child span, because a batch's statements have no time of their own to measure — pgx
// reports each when the caller reads its result, all inside the batch's one round trip — and
// a span costs the request several times what an event does (issue 44 holds tracing to 5 %
// of POST /v1/context, which sends ~25 statements in 5 batches). Spans and events carry the
// SQL text only (whitespace collapsed), never the arguments: Strata's SQL binds every
// value, so the text holds no data of a subject.
type PgxTracer struct{}

var dbSystem = attribute.String("db.system.name", "postgresql")

// stmt is what the spans and events of one distinct SQL text carry, computed once per text
// (statement) instead of once per execution.
type stmt struct {
	name  string                  // "pg SELECT": the span's or event's name
	text  attribute.KeyValue      // db.query.text
	start []trace.SpanStartOption // a span of its own: client kind, db.system.name, db.operation.name, text
	event []trace.EventOption     // an event of a batch's span: text (its name says the operation)
}

// maxStmts bounds the cache of statements: Strata's SQL is a few hundred constant texts,
// but a text built per call must not grow the cache without end (past the bound a text is
// prepared at each execution, as before).
const maxStmts = 4096

var (
	stmts     sync.Map // SQL text → *stmt
	stmtCount atomic.Int64
)

// statement is sql's cached span data.
func statement(sql string) *stmt {
	if s, ok := stmts.Load(sql); ok {
		return s.(*stmt)
	}
	s := newStmt(sql)
	if stmtCount.Load() < maxStmts {
		if prev, loaded := stmts.LoadOrStore(sql, s); loaded {
			return prev.(*stmt)
		}
		stmtCount.Add(1)
	}
	return s
}

func newStmt(sql string) *stmt {
	op := operation(sql)
	text := attribute.String("db.query.text", queryText(sql))
	return &stmt{
		name: "pg " + op,
		text: text,
		start: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(dbSystem, attribute.String("db.operation.name", op), text)},
		event: []trace.EventOption{trace.WithAttributes(text)},
	}
}

// queryText is sql with each run of white space outside quoted literals (the indentation
// of a multi-line statement) made one space: the same statement, shorter to export and to
// read.
func queryText(sql string) string {
	var b strings.Builder
	b.Grow(len(sql))
	space, quoted := false, false
	for _, r := range strings.TrimSpace(sql) {
		switch r {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			if !quoted {
				space = true
				continue
			}
		case '\'':
			quoted = !quoted
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// operation is the statement's first keyword (SELECT, INSERT, WITH...), the span's name.
func operation(sql string) string {
	sql = strings.TrimLeft(sql, " \t\r\n(")
	for strings.HasPrefix(sql, "--") { // a leading comment line
		_, rest, ok := strings.Cut(sql, "\n")
		if !ok {
			return "SQL"
		}
		sql = strings.TrimLeft(rest, " \t\r\n(")
	}
	end := strings.IndexAny(sql, " \t\r\n;(")
	if end < 0 {
		end = len(sql)
	}
	if end == 0 {
		return "SQL"
	}
	return strings.ToUpper(sql[:end])
}

// TraceQueryStart implements pgx.QueryTracer.
func (PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx // a statement outside any trace (pool upkeep, LISTEN loops): no root span of its own
	}
	s := statement(d.SQL)
	ctx, _ = tracer().Start(ctx, s.name, s.start...)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer. The span is the context's own: TraceQueryStart
// started one whenever the context was in a trace (outside one, the context's span is
// invalid and nothing is recorded).
func (PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() {
		if d.Err != nil {
			failed(span, d.Err)
		}
		span.End()
	}
}

var batchStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// TraceBatchStart implements pgx.BatchTracer.
func (PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	ctx, span := tracer().Start(ctx, "pg batch", batchStart...)
	n := 0
	if d.Batch != nil {
		n = d.Batch.Len()
	}
	span.SetAttributes(dbSystem, attribute.Int("db.operation.batch.size", n))
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer: one event on the batch's span per statement
// (see PgxTracer). A statement that failed names its SQLSTATE in its event and marks the
// batch failed.
func (PgxTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	s := statement(d.SQL)
	if d.Err == nil {
		span.AddEvent(s.name, s.event...)
		return
	}
	attrs := []attribute.KeyValue{s.text}
	if code := sqlState(d.Err); code != "" {
		attrs = append(attrs, attribute.String("db.response.status_code", code))
	}
	span.AddEvent(s.name, trace.WithAttributes(attrs...))
	span.SetStatus(codes.Error, "statement failed")
}

// TraceBatchEnd implements pgx.BatchTracer.
func (PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() {
		if d.Err != nil {
			failed(span, d.Err)
		}
		span.End()
	}
}

// failed marks span failed with the error's SQLSTATE only: an error's text can quote a
// value (invalid input syntax...).
func failed(span trace.Span, err error) {
	if code := sqlState(err); code != "" {
		span.SetAttributes(attribute.String("db.response.status_code", code))
	}
	span.SetStatus(codes.Error, "statement failed")
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// MultiTracer is one pgx tracer made of several (pgx takes one per pool): each sees every
// query and, when it implements pgx.BatchTracer, every batch. Nil tracers are dropped; one
// tracer is returned as is.
func MultiTracer(tracers ...pgx.QueryTracer) pgx.QueryTracer {
	var ts multiTracer
	for _, t := range tracers {
		if t != nil {
			ts = append(ts, t)
		}
	}
	switch len(ts) {
	case 0:
		return nil
	case 1:
		return ts[0]
	}
	return ts
}

type multiTracer []pgx.QueryTracer

func (m multiTracer) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	for _, t := range m {
		ctx = t.TraceQueryStart(ctx, c, d)
	}
	return ctx
}

func (m multiTracer) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	for _, t := range m {
		t.TraceQueryEnd(ctx, c, d)
	}
}

func (m multiTracer) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, t := range m {
		if bt, ok := t.(pgx.BatchTracer); ok {
			ctx = bt.TraceBatchStart(ctx, c, d)
		}
	}
	return ctx
}

func (m multiTracer) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	for _, t := range m {
		if bt, ok := t.(pgx.BatchTracer); ok {
			bt.TraceBatchQuery(ctx, c, d)
		}
	}
}

func (m multiTracer) TraceBatchEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	for _, t := range m {
		if bt, ok := t.(pgx.BatchTracer); ok {
			bt.TraceBatchEnd(ctx, c, d)
		}
	}
}
