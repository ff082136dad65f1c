package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A hung Postgres (packets dropped, no reset: a black hole) answers nothing, so the
// server-side statement_timeout never fires and a call would wait for its caller's context.
// A request's calls are bounded on the client instead: WithCallTimeout marks the request's
// context, and every call a pool of NewPool makes with it (or with a context derived from
// it) — waiting for a connection, a statement, a batch, COMMIT, the ROLLBACK of an abandoned
// transaction — ends after that duration with a connection error (UnavailableError, a 503),
// the connection closed. Work that is not a request (migrations, workers' passes) does not
// carry the mark and keeps its own contexts; the pool's statement_timeout still bounds it on
// the server. New connections are bounded by the pool's ConnectTimeout.

type callTimeoutKey struct{}
type callCancelKey struct{}

// WithCallTimeout bounds every Postgres call made with ctx to d (see above); d <= 0 leaves
// ctx unbounded.
func WithCallTimeout(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, callTimeoutKey{}, d)
}

// WithoutCallTimeout lifts the bound for work a request starts that must outlive it by
// design (a streamed export that lasts as long as its client reads).
func WithoutCallTimeout(ctx context.Context) context.Context {
	if CallTimeout(ctx) == 0 {
		return ctx
	}
	return context.WithValue(ctx, callTimeoutKey{}, time.Duration(0))
}

// CallTimeout is the bound WithCallTimeout set on ctx, or 0.
func CallTimeout(ctx context.Context) time.Duration {
	d, _ := ctx.Value(callTimeoutKey{}).(time.Duration)
	return d
}

// boundCall gives one call its deadline; endCall releases it.
func boundCall(ctx context.Context) context.Context {
	d := CallTimeout(ctx)
	if d <= 0 {
		return ctx
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return context.WithValue(ctx, callCancelKey{}, cancel)
}

func endCall(ctx context.Context) {
	if cancel, ok := ctx.Value(callCancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

// callBound is the pool's tracer: it gives each call of a marked context its deadline
// (pgx runs the call under the context a tracer's Start returns), then hands the call to
// the tracer the pool was opened with, if any.
type callBound struct{ inner pgx.QueryTracer }

var (
	_ pgx.QueryTracer       = callBound{}
	_ pgx.BatchTracer       = callBound{}
	_ pgx.PrepareTracer     = callBound{}
	_ pgx.CopyFromTracer    = callBound{}
	_ pgxpool.AcquireTracer = callBound{}
	_ pgxpool.ReleaseTracer = callBound{}
	_ pgx.ConnectTracer     = callBound{}
)

func (b callBound) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	ctx = boundCall(ctx)
	if b.inner != nil {
		ctx = b.inner.TraceQueryStart(ctx, c, d)
	}
	return ctx
}

func (b callBound) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	if b.inner != nil {
		b.inner.TraceQueryEnd(ctx, c, d)
	}
	endCall(ctx)
}

func (b callBound) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	ctx = boundCall(ctx)
	if t, ok := b.inner.(pgx.BatchTracer); ok {
		ctx = t.TraceBatchStart(ctx, c, d)
	}
	return ctx
}

func (b callBound) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	if t, ok := b.inner.(pgx.BatchTracer); ok {
		t.TraceBatchQuery(ctx, c, d)
	}
}

func (b callBound) TraceBatchEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	if t, ok := b.inner.(pgx.BatchTracer); ok {
		t.TraceBatchEnd(ctx, c, d)
	}
	endCall(ctx)
}

func (b callBound) TracePrepareStart(ctx context.Context, c *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	ctx = boundCall(ctx)
	if t, ok := b.inner.(pgx.PrepareTracer); ok {
		ctx = t.TracePrepareStart(ctx, c, d)
	}
	return ctx
}

func (b callBound) TracePrepareEnd(ctx context.Context, c *pgx.Conn, d pgx.TracePrepareEndData) {
	if t, ok := b.inner.(pgx.PrepareTracer); ok {
		t.TracePrepareEnd(ctx, c, d)
	}
	endCall(ctx)
}

func (b callBound) TraceCopyFromStart(ctx context.Context, c *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	ctx = boundCall(ctx)
	if t, ok := b.inner.(pgx.CopyFromTracer); ok {
		ctx = t.TraceCopyFromStart(ctx, c, d)
	}
	return ctx
}

func (b callBound) TraceCopyFromEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceCopyFromEndData) {
	if t, ok := b.inner.(pgx.CopyFromTracer); ok {
		t.TraceCopyFromEnd(ctx, c, d)
	}
	endCall(ctx)
}

// TraceAcquireStart bounds the wait for a pooled connection (a pool whose connections are
// all held by calls to a hung server, or a new connection that does not answer).
func (b callBound) TraceAcquireStart(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireStartData) context.Context {
	ctx = boundCall(ctx)
	if t, ok := b.inner.(pgxpool.AcquireTracer); ok {
		ctx = t.TraceAcquireStart(ctx, p, d)
	}
	return ctx
}

func (b callBound) TraceAcquireEnd(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if t, ok := b.inner.(pgxpool.AcquireTracer); ok {
		t.TraceAcquireEnd(ctx, p, d)
	}
	endCall(ctx)
}

func (b callBound) TraceRelease(p *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	if t, ok := b.inner.(pgxpool.ReleaseTracer); ok {
		t.TraceRelease(p, d)
	}
}

func (b callBound) TraceConnectStart(ctx context.Context, d pgx.TraceConnectStartData) context.Context {
	if t, ok := b.inner.(pgx.ConnectTracer); ok {
		return t.TraceConnectStart(ctx, d)
	}
	return ctx
}

func (b callBound) TraceConnectEnd(ctx context.Context, d pgx.TraceConnectEndData) {
	if t, ok := b.inner.(pgx.ConnectTracer); ok {
		t.TraceConnectEnd(ctx, d)
	}
}
