package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/groupcommit"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/joblog"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/turncontext"
	"github.com/strata-mem/strata/internal/webhooks"
	"github.com/strata-mem/strata/internal/working"
)

// Deps is what the HTTP layer is given. internal/app builds every store once and passes
// them here (and the same ones to the workers and MCP); the HTTP layer builds none.
type Deps struct {
	Log *slog.Logger
	// Trace, when set, wraps every request in a server span (telemetry.Middleware); nil
	// when tracing is off, so an untraced server runs no tracing code at all.
	Trace func(http.Handler) http.Handler
	// Metrics is the registry the HTTP layer registers its collectors on and serves at
	// /metrics (app registers the workers' on the same one).
	Metrics *prometheus.Registry
	// Pool begins each request's unit of work (pg.Session) and answers readiness; stores
	// never come from it here.
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient // readiness and pool metrics
	Keys  *auth.Store
	// Pseudo pseudonymises data subjects in the audit log.
	Pseudo *audit.Pseudonymizer
	// Restrictions answers GDPR Art. 18 checks (the wrapper enforces each operation's
	// declaration with it).
	Restrictions *gdpr.Restrictions

	Jobs   *jobs.Store
	Events *episodic.Store
	// JobLog composes a job with its episodic log (the writes that record the log's head,
	// forks, resume); built on Jobs and Events.
	JobLog   *joblog.Log
	Working  *working.Store
	KV       *keyvalue.Store
	Memories *semantic.Store
	// Graph holds entities and relations (/v1/graph, docs/graph.md).
	Graph *graph.Store
	// Embedder turns memory text into vectors (the semantic space is derived from it).
	Embedder embed.Embedder
	// Access counts the memories searches and context serve, written in batches; nil
	// counts them in each request's transaction (STRATA_ACCESS_FLUSH=0).
	Access       *semantic.AccessLog
	Evictor      *eviction.Evictor
	Consolidator *consolidation.Consolidator
	Erasures     *gdpr.Inserter
	// PolicyDefaults is the lifecycle policy an org runs on until it stores its own.
	PolicyDefaults policy.LifecyclePolicy
	// Context assembles each turn's context (POST /v1/context) from the stores above.
	Context *turncontext.Assembler
	// Now is the clock of what handlers stamp (erasures, restrictions, exports, policies);
	// nil: time.Now.
	Now func() time.Time
	// Anchorer signs audit chain heads (POST /v1/audit/anchors); AuditKeys are the public
	// keys anchors verify with (GET /v1/audit/verify).
	Anchorer  *audit.Anchorer
	AuditKeys audit.Keyring
	// Replicas routes the operations that may read from a Postgres read replica
	// (replicas.go); nil: every read on Pool.
	Replicas *pg.Replicas

	// Console builds the web console (internal/console) on the API as an in-process
	// handler; nil serves no console.
	Console func(api http.Handler) http.Handler

	// Extraction extracts memories from turns (POST /v1/memories/extract; appends mark
	// their turns for it); nil when the server has no LLM. ExtractionDefaultOn is the
	// default of the policy's extraction.enabled.
	Extraction          *extraction.Extractor
	ExtractionDefaultOn bool

	// Webhooks holds webhook subscriptions and deliveries (/v1/admin/webhooks); WebhookQueue
	// enqueues their deliveries (redelivery, ping) in the request's transaction; EventBroker
	// wakes the SSE streams (GET /v1/events/stream) when the outbox has news. Nil Webhooks
	// answers the webhook operations with 503.
	Webhooks     *webhooks.Store
	WebhookQueue *river.Client[pgx.Tx]
	EventBroker  *EventBroker
	// Emitted is told the org once a request that emitted events has committed (app: the
	// outbox.Waker, which wakes this process's dispatcher and streams and tells the other
	// replicas); nil wakes EventBroker's streams only.
	Emitted func(org string)
	// Draining reports that the process is shutting down: /readyz answers 503 while it is
	// true (app's drain, docs/reliability.md); nil never drains.
	Draining func() bool

	Options Options
}

// Options are the HTTP layer's own limits and switches.
type Options struct {
	MaxBodyBytes    int64
	MaxJSONDepth    int
	RequestTimeout  time.Duration
	StoreTimeout    time.Duration
	IdempotencyTTL  time.Duration
	IdempotencyWait time.Duration
	RateLimit       float64 // requests per second per key on this replica (0: off)
	RateBurst       int
	GroupCommit     bool // write concurrent event appends of one org in one transaction
	// SyncReadCommits makes reads' commits (their audit rows and served logs) wait for the
	// WAL flush; off, they commit without it (noFlushReads, pg.Session.NoFlushCommit).
	SyncReadCommits bool
	// NoEvents turns off the emission of outbox events by requests (benchmarks only: the
	// write path's cost of events is measured against it).
	NoEvents bool
	// EventsHeartbeat is the interval of the SSE stream's heartbeat comment (default 15s).
	EventsHeartbeat time.Duration
}

// Server is the HTTP API: the stores and limits it was given (Deps, read by the handlers as
// s.Jobs, s.Options, ...) and what it builds from them; no global state.
type Server struct {
	Deps
	space   semantic.Space // the embedder's vector space (semantic.Space of Deps.Embedder)
	metrics *httpops.Metrics
	limiter *httpops.KeyLimiter
	opOnce  sync.Once
	ops     map[string]*huma.Operation // "METHOD route" → its operation (operation)
	roles   map[string][]strata.Role   // operation id → the roles that may call it (handle; mayCall)
	router  chi.Router
	api     huma.API
	tools   agentTools             // MCP and /v1/tools (tools.go)
	groups  *groupcommit.Committer // group commit of event appends; nil when off (groupcommit.go)
}

// NewServer wires every route and returns the server (an http.Handler).
func NewServer(d Deps) *Server {
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Server{Deps: d, metrics: httpops.NewMetrics(d.Metrics, d.Pool, d.Redis),
		limiter: httpops.NewKeyLimiter(d.Options.RateLimit, d.Options.RateBurst),
		space:   semantic.Space{Embedder: d.Embedder.Name(), Model: d.Embedder.Model(), Dims: d.Embedder.Dims()},
		roles:   map[string][]strata.Role{}}
	if d.Options.GroupCommit {
		s.groups = groupcommit.New(d.Pool, d.Options.RequestTimeout, d.Options.IdempotencyTTL, s.metrics.Registry)
	}
	s.metrics.Registry.MustRegister(jobs.StalledCollector(s.Jobs, s.Pool, s.Options.StoreTimeout),
		gdpr.OverdueCollector(s.Pool, s.Now, s.Options.StoreTimeout))
	s.router = chi.NewRouter()
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// OpenAPI returns the generated OpenAPI 3.1 document.
func (s *Server) OpenAPI() *huma.OpenAPI { return s.api.OpenAPI() }

func newHumaConfig() huma.Config {
	cfg := huma.DefaultConfig("Strata", "1.0.0")
	cfg.Info.Description = "Durable, multi-tier memory for long-running AI agents. " +
		"Authenticate with `Authorization: Bearer <key>`. Every POST/PUT/PATCH accepts `Idempotency-Key`. " +
		"Errors are RFC 9457 application/problem+json."
	cfg.OpenAPIPath = "" // served by routes() outside the authenticated group
	cfg.DocsPath = ""
	cfg.SchemasPath = ""
	cfg.CreateHooks = nil // no $schema links in bodies
	// The graph tier's types share names with the semantic tier's (Space, Provenance):
	// theirs are named Graph… in the document.
	cfg.Components.Schemas = huma.NewMapRegistry("#/components/schemas/", schemaNamer)
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A Strata API key."},
	}
	cfg.Security = []map[string][]string{{"bearer": {}}}
	cfg.Transformers = []huma.Transformer{scrubInternal, clarifyProblems(cfg.Components.Schemas)}
	cfg.Formats = map[string]huma.Format{"application/json": jsonFormat, "json": jsonFormat}
	return cfg
}

// schemaNamer is huma's namer, with the graph tier's types (and lists of them) prefixed.
func schemaNamer(t reflect.Type, hint string) string {
	name := huma.DefaultSchemaNamer(t, hint)
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if (strings.HasSuffix(t.PkgPath(), "/internal/graph") || strings.Contains(t.Name(), "/internal/graph.")) &&
		!strings.HasPrefix(name, "Graph") {
		return "Graph" + name
	}
	return name
}

func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/vnd.oai.openapi+json")
	_ = json.NewEncoder(w).Encode(s.api.OpenAPI())
}

// Router exposes the chi router, for mounting extra handlers (MCP) and for tests that walk
// the routes.
func (s *Server) Router() chi.Router { return s.router }
