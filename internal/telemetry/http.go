package telemetry

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Middleware makes the server span of each request: it continues the caller's trace when
// the request carries a W3C traceparent, is named "METHOD /route/{pattern}" once chi has
// routed it (never the raw path, which holds ids), and carries the request id that
// requestID reads from the request's context. Probes and scrapes (/healthz, /readyz,
// /metrics) are not traced: they would be most of the traces and tell nothing.
func Middleware(requestID func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				next.ServeHTTP(w, r)
				return
			}
			ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer().Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method)))
			defer span.End()
			if id := requestID(r); id != "" {
				span.SetAttributes(attribute.String("strata.request_id", id))
			}
			sw := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r.WithContext(ctx))
			route := "unmatched"
			if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
				route = rc.RoutePattern()
			}
			span.SetName(r.Method + " " + route)
			span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", sw.status))
			if sw.status >= 500 {
				span.SetStatus(codes.Error, strconv.Itoa(sw.status))
			}
		})
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusRecorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush passes on to the writer beneath (SSE streams flush).
func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer beneath.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Transport wraps base (nil: http.DefaultTransport) so that each outgoing request made
// inside a span is a client span and carries the caller's trace context (traceparent).
// Spans name the method and the server (host:port) and record the status: never the path
// or the query, which for webhooks can hold a receiver's secret token (a Slack-style URL),
// nor a body. Requests outside any span pass through untouched.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return transport{base}
}

type transport struct{ base http.RoundTripper }

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return t.base.RoundTrip(r)
	}
	attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method), attribute.String("server.address", r.URL.Hostname())}
	if port := r.URL.Port(); port != "" {
		if n, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, attribute.Int("server.port", n))
		}
	}
	ctx, span := tracer().Start(ctx, "HTTP "+r.Method+" "+r.URL.Host, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	r = r.Clone(ctx) // a RoundTripper must not modify the caller's request
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(r.Header))
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		span.SetStatus(codes.Error, "request failed") // the error text names the URL: not recorded
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
	}
	return resp, nil
}
