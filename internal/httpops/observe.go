package httpops

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/redisconn"
)

// Metrics are the request metrics and the process, pool and store collectors, on the
// registry the server was given (served at /metrics by Handler).
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// StoreErrors counts requests answered 503 because a store was unreachable.
	StoreErrors *prometheus.CounterVec

	// series keeps each (method, route, status)'s counter and histogram: looking them up
	// by label values costs allocations on every request (the values' slice, the status's
	// string); the key set is the vectors' own, so it grows no further than they do.
	seriesMu sync.RWMutex
	series   map[seriesKey]requestSeries
}

type seriesKey struct {
	method, route string
	status        int
}

type requestSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// observe counts one request and its duration.
func (m *Metrics) observe(method, route string, status int, d time.Duration) {
	k := seriesKey{method, route, status}
	m.seriesMu.RLock()
	s, ok := m.series[k]
	m.seriesMu.RUnlock()
	if !ok {
		s = requestSeries{m.requests.WithLabelValues(method, route, strconv.Itoa(status)), m.duration.WithLabelValues(method, route)}
		m.seriesMu.Lock()
		if m.series == nil {
			m.series = map[seriesKey]requestSeries{}
		}
		m.series[k] = s
		m.seriesMu.Unlock()
	}
	s.requests.Inc()
	s.duration.Observe(d.Seconds())
}

// NewMetrics registers the request metrics and the Go, process, Postgres-pool, Postgres and
// Redis-pool collectors on reg.
func NewMetrics(reg *prometheus.Registry, pool *pgxpool.Pool, rdb redis.UniversalClient) *Metrics {
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_http_requests_total", Help: "HTTP requests by method, route pattern and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "strata_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method", "route"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_store_unavailable_total", Help: "Requests answered 503 because a store was unreachable.",
		}, []string{"store"}),
	}
	reg.MustRegister(m.requests, m.duration, m.StoreErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		pg.PoolCollector(pool), pg.StatsCollector(pool, 2*time.Second), redisconn.PoolCollector(rdb))
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// statusWriter remembers the status and size of what was written.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// callerSlot is where authentication, which runs inside Observe, leaves the caller for the
// access log line that Observe writes once the request is done: the authenticated request's
// context is not the one Observe holds, so the principal travels back through this pointer.
// A request made in-process for an outer one (the console's and the Mem0 API's calls of the
// API) has its own slot whose parent is the outer request's: the outer line names the caller
// its first authenticated inner call found, when the outer request had none of its own.
type callerSlot struct {
	p      atomic.Pointer[auth.Principal]
	parent *callerSlot
}

type callerSlotKey struct{}

// observeCtx is Observe's state for a request, and the context that carries its caller
// slot (context.WithValue's behaviour, with the value stored inline).
type observeCtx struct {
	context.Context
	sw   statusWriter
	slot callerSlot
}

func (c *observeCtx) Value(key any) any {
	switch key.(type) {
	case callerSlotKey:
		return &c.slot
	case unboundedKey:
		return c // the request's context as Observe got it: before its timeout
	}
	return c.Context.Value(key)
}

type unboundedKey struct{}

// WithoutRequestTimeout is ctx (a request's, under Observe) with its values but without the
// request timeout Observe bounds it by: it ends when the request's own context does (the
// client went away, the server closed the connection) or when cancel is called. For
// handlers that live as long as their client, such as the event stream; each store call
// they make still needs its own bound. Outside Observe it is ctx with a cancel.
func WithoutRequestTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	base, ok := ctx.Value(unboundedKey{}).(context.Context)
	if !ok {
		return context.WithCancel(ctx)
	}
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(base, cancel)
	return out, func() { stop(); cancel() }
}

// WithCaller attaches the authenticated caller to ctx (auth.WithPrincipal) and tells the
// enclosing Observe, so the request's log line names its org_id and key_id.
func WithCaller(ctx context.Context, p auth.Principal) context.Context {
	ctx, pp := auth.WithPrincipalShared(ctx, p) // one copy on the heap, shared by the slot and the context
	if slot, ok := ctx.Value(callerSlotKey{}).(*callerSlot); ok {
		slot.p.Store(pp)
		for outer := slot.parent; outer != nil; outer = outer.parent {
			outer.p.CompareAndSwap(nil, pp) // in-process calls may run concurrently
		}
	}
	return ctx
}

// Observe logs one line per request (ids, route, status, timing; never a body or a
// parameter value) and records the request metrics; it turns a panic into a 500 problem
// that names the request id and nothing else, and bounds each request by timeout.
func Observe(log *slog.Logger, m *Metrics, timeout time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			// The writer, the caller's slot and the context that carries the slot live for the
			// request alike: one allocation.
			st := &observeCtx{Context: r.Context(), sw: statusWriter{ResponseWriter: w}}
			sw, slot := &st.sw, &st.slot
			slot.parent, _ = r.Context().Value(callerSlotKey{}).(*callerSlot)
			defer func() {
				if rec := recover(); rec != nil {
					if rec == http.ErrAbortHandler {
						panic(rec)
					}
					log.ErrorContext(r.Context(), "panic", "request_id", RequestID(r.Context()),
						"panic", rec, "stack", string(debug.Stack()))
					if sw.status == 0 {
						WriteProblem(sw, r, http.StatusInternalServerError, InternalDetail, nil)
					}
				}
				route := chi.RouteContext(r.Context()).RoutePattern()
				if route == "" {
					route = "unmatched"
				}
				status := sw.status
				if status == 0 {
					status = http.StatusOK
				}
				d := time.Since(start)
				m.observe(r.Method, route, status, d)
				var p auth.Principal
				if sp := slot.p.Load(); sp != nil {
					p = *sp
				} else { // a caller attached before Observe ran (the console's in-process requests)
					p, _ = auth.FromContext(r.Context())
				}
				level := slog.LevelInfo
				if status >= 500 {
					level = slog.LevelError
				}
				if route == "/healthz" || route == "/readyz" || route == "/metrics" {
					level = slog.LevelDebug
				}
				if log.Enabled(r.Context(), level) { // the attributes cost allocations even when dropped
					log.Log(r.Context(), level, "request",
						"request_id", RequestID(r.Context()), "method", r.Method, "route", route, "status", status,
						"duration_ms", float64(d.Microseconds())/1000, "bytes", sw.bytes,
						"org_id", p.OrgID, "key_id", p.KeyID)
				}
			}()
			ctx, cancel := context.WithTimeout(st, timeout)
			defer cancel()
			next.ServeHTTP(sw, r.WithContext(ctx))
		})
	}
}
