package telemetry_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/strata-mem/strata/internal/apptest"
)

// receiver is an OTLP/HTTP trace endpoint: it decodes each export request's protobuf
// payload with the OpenTelemetry proto module, as a collector does.
type receiver struct {
	mu        sync.Mutex
	spans     []*tracepb.Span
	resources []*commonpb.KeyValue
	requests  int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.requests++
	for _, rs := range req.GetResourceSpans() {
		rc.resources = append(rc.resources, rs.GetResource().GetAttributes()...)
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *receiver) all() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return valueString(kv.GetValue())
		}
	}
	return ""
}

// valueString renders any attribute value (nested arrays and maps too) as text to scan.
func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, valueString(e))
		}
		return strings.Join(parts, ",")
	case *commonpb.AnyValue_KvlistValue:
		var parts []string
		for _, kv := range x.KvlistValue.GetValues() {
			parts = append(parts, kv.GetKey()+"="+valueString(kv.GetValue()))
		}
		return strings.Join(parts, ",")
	case *commonpb.AnyValue_BytesValue:
		return string(x.BytesValue)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

// everything is every text a span exports: name, status, attributes of the span, its
// events and links, and the resources'.
func everything(spans []*tracepb.Span, resources []*commonpb.KeyValue) []string {
	var out []string
	kvs := func(where string, list []*commonpb.KeyValue) {
		for _, kv := range list {
			out = append(out, where+" "+kv.GetKey()+"="+valueString(kv.GetValue()))
		}
	}
	kvs("resource", resources)
	for _, s := range spans {
		out = append(out, "span name "+s.GetName(), "status "+s.GetStatus().GetMessage())
		kvs(s.GetName(), s.GetAttributes())
		for _, e := range s.GetEvents() {
			out = append(out, "event "+e.GetName())
			kvs(s.GetName()+" event", e.GetAttributes())
		}
		for _, l := range s.GetLinks() {
			kvs(s.GetName()+" link", l.GetAttributes())
		}
	}
	return out
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// TestTracesOverOTLP starts the real server with OTEL_EXPORTER_OTLP_ENDPOINT pointing at an
// OTLP/HTTP receiver in the test, runs a scenario with a caller's traceparent, and checks
// what arrived: the tree of one POST /v1/context (the caller's trace continued, the handler
// span named by its route with the request id, Postgres statements and Redis commands
// beneath it), one River job (a webhook delivery) linked to the request that queued it and
// whose outgoing delivery carries its traceparent, trace ids in the log — and that no
// exported text holds the user id or the memory's text.
func TestTracesOverOTLP(t *testing.T) {
	rc, otlp := startReceiver(t)

	hooks := make(chan http.Header, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks <- r.Header.Clone()
	}))
	t.Cleanup(hook.Close)

	sent := &sentStatements{byTrace: map[string][]string{}}
	s := apptest.Start(t, apptest.Env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL), apptest.Tracer(sent),
		apptest.Env("STRATA_LOG_LEVEL", "info"),
		apptest.Env("STRATA_WEBHOOK_ALLOW_PRIVATE", "true"), apptest.Env("STRATA_WEBHOOK_BACKOFF", "50ms"))
	key := s.NewKey("otel-org", "agent")
	admin := s.NewKey("otel-org", "admin")

	const hookToken = "T0SECRET-tok3n"                      // a receiver's secret in its webhook URL: in no span
	const user = "user-4c1e9b7a"                            // must appear in no span
	const text = "prefers zebra-lasagna recipes on Fridays" // nor this
	must := func(r *apptest.Response, status ...int) *apptest.Response {
		t.Helper()
		require.Contains(t, status, r.Status, string(r.Body))
		return r
	}
	must(s.Do("POST", "/v1/memories", key, map[string]any{"text": text, "user_id": user}), 201)
	must(s.Do("PUT", "/v1/sessions/sess-otel/state", key, map[string]any{"state": map[string]any{"note": text},
		"user_id": user, "agent_id": "a1"}), 201)
	must(s.Do("POST", "/v1/sessions/sess-otel/messages", key, map[string]any{"role": "user", "content": text}), 201)
	must(s.Do("POST", "/v1/memories/search", key, map[string]any{"query": "zebra-lasagna", "user_id": user}), 200)

	// The caller's trace: Strata's handler span must continue it.
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctxResp := must(s.Do("POST", "/v1/context", key, map[string]any{"user_id": user, "session_id": "sess-otel",
		"agent_id": "a1", "query": "zebra-lasagna"},
		"traceparent", "00-"+callerTrace+"-"+callerSpan+"-01"), 200)
	requestID := ctxResp.Header.Get("X-Request-Id")
	require.NotEmpty(t, requestID)

	// A queued job: a webhook ping, queued by the request in its transaction, delivered by
	// a River worker.
	const pingTrace, pingSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	sub := must(s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": hook.URL + "/services/" + hookToken, "event_types": []string{"*"}}), 201).Map(t)
	must(s.Do("POST", "/v1/admin/webhooks/"+sub["id"].(string)+"/ping", admin, nil,
		"traceparent", "00-"+pingTrace+"-"+pingSpan+"-01"), 202)
	var delivered http.Header
	select {
	case delivered = <-hooks:
	case <-time.After(30 * time.Second):
		t.Fatal("no webhook delivery within 30s")
	}
	// /mem0 and /mcp honour the caller's traceparent too.
	const mem0Trace, mcpTrace = "11111111111111111111111111111111", "22222222222222222222222222222222"
	must(s.Do("POST", "/mem0/v1/memories/", key, map[string]any{"messages": text, "user_id": user, "infer": false},
		"traceparent", "00-"+mem0Trace+"-"+callerSpan+"-01"), 200, 201)
	s.Do("POST", "/mcp", key, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}},
		"Accept", "application/json, text/event-stream", "traceparent", "00-"+mcpTrace+"-"+callerSpan+"-01")
	logs := s.Logs()
	s.Stop() // the ordered shutdown flushes the spans

	spans := rc.all()
	require.NotEmpty(t, spans, "no spans arrived at the OTLP receiver")
	byID := index(spans)
	underneath := func(sp, ancestor *tracepb.Span) bool { return descends(byID, sp, ancestor) }

	for _, sp := range spans { // apptest polled /readyz until the server was ready: probes are not traced
		require.NotEqual(t, "/readyz", attr(sp, "http.route"))
	}

	// 1. POST /v1/context: the caller's trace, the caller's span as parent, the route as name.
	var handler *tracepb.Span
	for _, sp := range spans {
		if hexID(sp.GetTraceId()) == callerTrace && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			require.Nil(t, handler, "two server spans in the caller's trace")
			handler = sp
		}
	}
	require.NotNil(t, handler, "no server span continues the caller's trace")
	require.Equal(t, callerSpan, hexID(handler.GetParentSpanId()))
	require.Equal(t, "POST /v1/context", handler.GetName())
	require.Equal(t, "/v1/context", attr(handler, "http.route"))
	require.Equal(t, requestID, attr(handler, "strata.request_id"))
	var exported []string // the SQL of each statement in the trace: a span's, or an event's of a batch's span
	var redisSpans int
	for _, sp := range spans {
		if hexID(sp.GetTraceId()) != callerTrace || sp == handler {
			continue
		}
		require.True(t, underneath(sp, handler), "span %q is in the trace but not under the handler", sp.GetName())
		switch attr(sp, "db.system.name") {
		case "postgresql":
			if q := attr(sp, "db.query.text"); q != "" {
				exported = append(exported, q)
			}
			for _, e := range sp.GetEvents() {
				for _, kv := range e.GetAttributes() {
					if kv.GetKey() == "db.query.text" {
						exported = append(exported, valueString(kv.GetValue()))
					}
				}
			}
			require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, sp.GetKind())
		case "redis":
			redisSpans++
			require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, sp.GetKind())
		}
	}
	t.Logf("the trace of POST /v1/context:\n%s", tree(spans, handler, ""))
	require.Positive(t, redisSpans, "no Redis command under the handler")
	// Every statement the server sent for the call is in its trace, once, by its text.
	want := sent.of(callerTrace)
	require.NotEmpty(t, want, "no Postgres statement under the handler")
	slices.Sort(want)
	slices.Sort(exported)
	require.Equal(t, want, exported, "the statements sent and the statements in the trace")
	t.Logf("POST /v1/context: %d statements, %d spans in its trace", len(want), inTrace(spans, callerTrace))

	for trace, route := range map[string]string{mem0Trace: "/mem0/", mcpTrace: "/mcp"} {
		var found *tracepb.Span
		for _, sp := range spans {
			if hexID(sp.GetTraceId()) == trace && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER && hexID(sp.GetParentSpanId()) == callerSpan {
				found = sp
			}
		}
		require.NotNil(t, found, "no server span continues the caller's trace on %s", route)
		require.True(t, strings.HasPrefix(attr(found, "http.route"), route), attr(found, "http.route"))
		t.Logf("%s: %s", route, found.GetName())
	}

	// 2. The job: a consumer span of its own trace, linked to the ping request's span.
	var ping, job *tracepb.Span
	for _, sp := range spans {
		if hexID(sp.GetTraceId()) == pingTrace && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			ping = sp
		}
	}
	require.NotNil(t, ping, "no server span for the ping")
	require.Equal(t, "POST /v1/admin/webhooks/{id}/ping", ping.GetName())
	for _, sp := range spans {
		if sp.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER {
			continue
		}
		for _, l := range sp.GetLinks() {
			if hexID(l.GetTraceId()) == pingTrace {
				require.Nil(t, job, "two jobs linked to the ping")
				job = sp
				linked, ok := byID[hexID(l.GetSpanId())]
				require.True(t, ok, "the link names a span that was not exported")
				require.True(t, linked == ping || underneath(linked, ping), "the link is not to the ping request")
			}
		}
	}
	require.NotNil(t, job, "no job span linked to the request that queued it")
	require.True(t, strings.HasPrefix(job.GetName(), "river.work webhook"), job.GetName())
	require.NotEqual(t, pingTrace, hexID(job.GetTraceId()), "a job is a trace of its own, linked")
	// The delivery went out with the job's trace context, from a client span under the job.
	tp := delivered.Get("traceparent")
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tp)
	require.Equal(t, hexID(job.GetTraceId()), strings.Split(tp, "-")[1])
	out, ok := byID[strings.Split(tp, "-")[2]]
	require.True(t, ok, "the delivery's span was not exported")
	require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, out.GetKind())
	require.True(t, underneath(out, job))

	// 3. Logs: the access log line of the context request names its trace.
	var found bool
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, requestID) && strings.Contains(line, `"trace_id":"`+callerTrace+`"`) {
			found = true
		}
	}
	require.True(t, found, "no log record of the request carries its trace id")

	// 4. No personal data: neither the user id nor the memory's text in any exported text.
	rc.mu.Lock()
	resources := append([]*commonpb.KeyValue(nil), rc.resources...)
	rc.mu.Unlock()
	texts := everything(spans, resources)
	require.NotEmpty(t, texts)
	for _, s := range texts {
		require.NotContains(t, s, user)
		require.NotContains(t, s, hookToken)
		for _, word := range []string{"zebra", "lasagna", "Fridays"} {
			require.NotContains(t, s, word)
		}
	}
	require.Contains(t, strings.Join(texts, "\n"), "service.name=strata-under-test")
	t.Logf("%d spans in %d export requests", len(spans), rc.requests)
}

// sentStatements is a pgx tracer of the server's pool (beside the server's own) recording
// the SQL of each statement sent in a trace, by trace id, whitespace collapsed as spans
// carry it.
type sentStatements struct {
	mu      sync.Mutex
	byTrace map[string][]string
}

func (s *sentStatements) record(ctx context.Context, sql string) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		s.mu.Lock()
		s.byTrace[sc.TraceID().String()] = append(s.byTrace[sc.TraceID().String()], strings.Join(strings.Fields(sql), " "))
		s.mu.Unlock()
	}
}

func (s *sentStatements) of(traceID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byTrace[traceID])
}

func (s *sentStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.record(ctx, d.SQL)
	return ctx
}
func (s *sentStatements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *sentStatements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *sentStatements) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.record(ctx, d.SQL)
}
func (s *sentStatements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func inTrace(spans []*tracepb.Span, traceID string) int {
	n := 0
	for _, sp := range spans {
		if hexID(sp.GetTraceId()) == traceID {
			n++
		}
	}
	return n
}

// tree renders root and its descendants, one span a line (the test's log shows the shape).
func tree(spans []*tracepb.Span, root *tracepb.Span, indent string) string {
	out := indent + root.GetName() + "\n"
	for _, e := range root.GetEvents() {
		out += indent + "  · " + e.GetName() + "\n"
	}
	for _, sp := range spans {
		if hexID(sp.GetParentSpanId()) == hexID(root.GetSpanId()) && hexID(sp.GetTraceId()) == hexID(root.GetTraceId()) {
			out += tree(spans, sp, indent+"  ")
		}
	}
	return out
}

// startReceiver starts an OTLP/HTTP receiver for the test and points the SDK at it (the SDK
// reads the process environment; the server's gate reads its own, which the test sets too).
func startReceiver(t *testing.T) (*receiver, *httptest.Server) {
	rc := &receiver{}
	otlp := httptest.NewServer(rc)
	t.Cleanup(otlp.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_SERVICE_NAME", "strata-under-test")
	return rc, otlp
}

// index is the spans by span id.
func index(spans []*tracepb.Span) map[string]*tracepb.Span {
	byID := map[string]*tracepb.Span{}
	for _, sp := range spans {
		byID[hexID(sp.GetSpanId())] = sp
	}
	return byID
}

// descends reports whether sp descends from ancestor (through spans that arrived).
func descends(byID map[string]*tracepb.Span, sp, ancestor *tracepb.Span) bool {
	for p := hexID(sp.GetParentSpanId()); p != ""; {
		if p == hexID(ancestor.GetSpanId()) {
			return true
		}
		parent, ok := byID[p]
		if !ok {
			return false
		}
		p = hexID(parent.GetParentSpanId())
	}
	return false
}
