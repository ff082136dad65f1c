package telemetry

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer makes a client span for each statement a pool's connections send, and for each
// batch with one child span per statement. A span carries the SQL text only: never the
// arguments (Strata's SQL binds every value, so the text holds no data of a subject).
type PgxTracer struct{}

type pgSpanKey struct{}

var dbSystem = attribute.String("db.system.name", "postgresql")

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

func startPg(ctx context.Context, name, sql string) (context.Context, trace.Span) {
	return tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(dbSystem, attribute.String("db.operation.name", operation(sql)),
			attribute.String("db.query.text", sql)))
}

func endPg(span trace.Span, err error) {
	if err != nil {
		// The SQLSTATE only: an error's text can quote a value (invalid input syntax...).
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			span.SetAttributes(attribute.String("db.response.status_code", pgErr.Code))
		}
		span.SetStatus(codes.Error, "statement failed")
	}
	span.End()
}

// TraceQueryStart implements pgx.QueryTracer.
func (PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx // a statement outside any trace (pool upkeep, LISTEN loops): no root span of its own
	}
	ctx, span := startPg(ctx, "pg "+operation(d.SQL), d.SQL)
	return context.WithValue(ctx, pgSpanKey{}, span)
}

// TraceQueryEnd implements pgx.QueryTracer.
func (PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if span, ok := ctx.Value(pgSpanKey{}).(trace.Span); ok {
		endPg(span, d.Err)
	}
}

type pgBatchKey struct{}

// TraceBatchStart implements pgx.BatchTracer.
func (PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	n := 0
	if d.Batch != nil {
		n = d.Batch.Len()
	}
	ctx, span := tracer().Start(ctx, "pg batch", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(dbSystem, attribute.Int("db.operation.batch.size", n)))
	return context.WithValue(ctx, pgBatchKey{}, span)
}

// TraceBatchQuery implements pgx.BatchTracer: one span per statement of the batch, under
// the batch's span (pgx reports a statement once its result is read).
func (PgxTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if _, ok := ctx.Value(pgBatchKey{}).(trace.Span); !ok {
		return
	}
	_, span := startPg(ctx, "pg "+operation(d.SQL), d.SQL)
	endPg(span, d.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	if span, ok := ctx.Value(pgBatchKey{}).(trace.Span); ok {
		endPg(span, d.Err)
	}
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
