package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// Deps is what the HTTP layer composes. cmd/server builds it; tests build it the same way.
type Deps struct {
	Config config.Config
	Log    *slog.Logger
	Pool   *pgxpool.Pool
	Redis  redis.UniversalClient
	Keys   *auth.Store
	// Pseudo pseudonymises data subjects in the audit log.
	Pseudo *audit.Pseudonymizer
	// Embedder turns memory text into vectors; nil means the configured default.
	Embedder embed.Embedder
	// Restrictions keeps orgs' restricted subjects in memory while it listens (nil: every
	// restriction check asks Postgres).
	Restrictions *gdpr.RestrictionCache
}

// Server is the HTTP API. It holds the tier services and no global state.
type Server struct {
	cfg    config.Config
	log    *slog.Logger
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	keys   *auth.Store
	pseudo *audit.Pseudonymizer
	emb    embed.Embedder
	// restrictions caches the restriction check (nil: none).
	restrictions *gdpr.RestrictionCache
	metrics      *metrics
	limiter      *keyLimiter
	opOnce       sync.Once
	opIDs        map[string]string // "METHOD route" → operation id
	router       chi.Router
	api          huma.API
	tools        agentTools // MCP and /v1/tools (tools.go)
	events       *episodic.Store
	groups       *groupCommitter // group commit of event appends; nil when off (groupcommit.go)
	// access counts the memories searches and context serve, written in batches; nil
	// when STRATA_ACCESS_FLUSH=0 (counted in each request's transaction).
	access *semantic.AccessLog
}

// NewServer wires every route and returns the server (an http.Handler).
func NewServer(d Deps) *Server {
	s := &Server{cfg: d.Config, log: d.Log, pool: d.Pool, rdb: d.Redis, keys: d.Keys, pseudo: d.Pseudo, emb: d.Embedder,
		restrictions: d.Restrictions, metrics: newMetrics(d.Pool, d.Redis), limiter: newKeyLimiter(d.Config.RateLimit, d.Config.RateBurst)}
	if s.pseudo == nil {
		s.pseudo = audit.NewPseudonymizer(d.Config.AdminKey + "/audit")
	}
	if d.Config.GroupCommit {
		s.groups = newGroupCommitter(d.Pool, d.Config.RequestTimeout, d.Config.IdempotencyTTL, s.metrics.reg)
	}
	if d.Config.AccessFlush > 0 {
		s.access = semantic.NewAccessLog(d.Pool, d.Log, d.Config.AccessFlush, s.metrics.reg)
	}
	s.router = chi.NewRouter()
	s.routes()
	return s
}

// Start runs the server's own background work (the batched memory access counts) until
// Stop. Requests served before Start are counted at its first flush.
func (s *Server) Start(ctx context.Context) {
	if s.access != nil {
		s.access.Start(ctx)
	}
}

// Stop writes what the server holds for batched writes (after the HTTP server has drained,
// before the pools close).
func (s *Server) Stop(ctx context.Context) error {
	if s.access != nil {
		return s.access.Stop(ctx)
	}
	return nil
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
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A Strata API key."},
	}
	cfg.Security = []map[string][]string{{"bearer": {}}}
	return cfg
}

// documentedErrors are the statuses every /v1 operation may answer.
var documentedErrors = []int{400, 401, 403, 404, 409, 413, 415, 422, 429, 503}

// register adds one operation that requires one of roles (admin may do everything). The
// handler's errors pass through s.problem, so tiers return plain strata errors.
func register[I, O any](s *Server, roles []strata.Role, op huma.Operation, h func(context.Context, *I) (*O, error)) {
	op.Errors = append(op.Errors, documentedErrors...)
	if op.MaxBodyBytes == 0 {
		op.MaxBodyBytes = s.cfg.MaxBodyBytes
	}
	huma.Register(s.api, op, func(ctx context.Context, in *I) (*O, error) {
		p, ok := auth.FromContext(ctx)
		if !ok || !p.Can(roles...) {
			return nil, huma.Error403Forbidden("this API key's role (" + string(p.Role) + ") may not call " + op.OperationID)
		}
		out, err := h(ctx, in)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return out, nil
	})
}

var (
	agentRoles      = []strata.Role{strata.RoleAgent}
	complianceRoles = []strata.Role{strata.RoleCompliance}
	adminRoles      = []strata.Role{strata.RoleAdmin}
)

func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/vnd.oai.openapi+json")
	_ = json.NewEncoder(w).Encode(s.api.OpenAPI())
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// requireAdmin guards non-huma routes (pprof) with the admin role.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, _ := auth.FromContext(r.Context()); p.Role != strata.RoleAdmin {
			writeProblem(w, r, http.StatusForbidden, "profiling needs an admin key", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func pprofRoutes(r chi.Router) {
	r.HandleFunc("/debug/pprof/", pprof.Index)
	r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	r.HandleFunc("/debug/pprof/profile", pprof.Profile)
	r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	r.Handle("/debug/pprof/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Handler(chi.URLParam(r, "name")).ServeHTTP(w, r)
	}))
}

// Router exposes the chi router, for mounting extra handlers (MCP) and for tests that walk
// the routes.
func (s *Server) Router() chi.Router { return s.router }
