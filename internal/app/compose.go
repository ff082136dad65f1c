package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river/rivertype"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/console"
	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/eviction"
	"github.com/strata-mem/strata/internal/extraction"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/httpapi"
	"github.com/strata-mem/strata/internal/httpops"
	"github.com/strata-mem/strata/internal/joblog"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/telemetry"
	"github.com/strata-mem/strata/internal/turncontext"
	"github.com/strata-mem/strata/internal/webhooks"
	"github.com/strata-mem/strata/internal/working"
)

// parts is everything a replica is made of, each built once from the configuration (this
// file is the only place that reads config.Config for them) and handed as typed
// dependencies to the HTTP layer, the workers and MCP. No package below app builds a store.
type parts struct {
	cfg     config.Config
	log     *slog.Logger
	metrics *prometheus.Registry
	pool    *pgxpool.Pool
	rdb     redis.UniversalClient
	keys    *auth.Store
	pseudo  *audit.Pseudonymizer

	restrictions *gdpr.Restrictions
	jobs         *jobs.Store
	events       *episodic.Store
	working      *working.Store
	kv           *keyvalue.Store
	memories     *semantic.Store
	emb          embed.Embedder
	access       *semantic.AccessLog // nil when STRATA_ACCESS_FLUSH=0
	scopeIndexer *semantic.ScopeIndexer
	evictor      *eviction.Evictor
	jobMetrics   *jobMetrics // background jobs' run and queue-wait times (workers_lifecycle.go)
	consolidator *consolidation.Consolidator
	erasures     *gdpr.Inserter
	policy       policy.LifecyclePolicy // the defaults an org runs on until it stores its own
	assembler    *turncontext.Assembler // per-turn context (POST /v1/context)
	audit        *auditKeys             // anchor signing and verification; nil in NewServer
	replicas     *pg.Replicas           // read replicas; nil without STRATA_DATABASE_REPLICA_URL
	extractor    *extraction.Extractor  // conversation memory; nil without STRATA_LLM_MODEL
	rolling      *consolidation.Rolling // rolling summaries of sessions and long jobs
	graph        *graph.Store           // entities and relations (docs/graph.md)
	webhooks     *webhooks.Store        // webhook subscriptions and deliveries (docs/events.md)
	broker       *httpapi.EventBroker   // wakes SSE streams on the outbox's NOTIFY
	waker        *outbox.Waker          // wakes the event readers once a request emitted; nil in NewServer
	tracing      bool                   // OpenTelemetry on (OTEL_EXPORTER_OTLP_ENDPOINT): instruments installed
	draining     atomic.Bool            // the process is shutting down: /readyz answers 503 (serve)
}

// compose builds the parts on open pools. keys, pseudo and the restriction cache come from
// the caller (serve starts their LISTEN loop); nil pseudo derives one from the admin key.
func compose(cfg config.Config, log *slog.Logger, pool *pgxpool.Pool, rdb redis.UniversalClient,
	keys *auth.Store, pseudo *audit.Pseudonymizer, restricted *gdpr.RestrictionCache, tracing bool) (*parts, error) {
	// With tracing on, the embedding and model APIs' calls are client spans carrying the
	// caller's traceparent; off, the clients are the libraries' defaults.
	var hc *http.Client
	if tracing {
		hc = &http.Client{Transport: telemetry.Transport(nil)}
	}
	emb, err := newEmbedder(cfg, hc)
	if err != nil {
		return nil, err
	}
	if pseudo == nil {
		pseudo = audit.NewPseudonymizer(cfg.AdminKey + "/audit")
	}
	p := &parts{cfg: cfg, log: log, metrics: prometheus.NewRegistry(), pool: pool, rdb: rdb, keys: keys, pseudo: pseudo,
		restrictions: gdpr.NewRestrictions(pool, restricted), emb: emb, policy: policy.DefaultPolicy(cfg.VerifyAge),
		tracing: tracing}
	p.jobs = jobs.NewStore(cfg.StalledAfter, nil)
	p.events = episodic.NewStore(episodic.Options{MaxJSONDepth: cfg.MaxJSONDepth})
	p.working = working.New(pool, rdb, working.Options{Prefix: cfg.RedisPrefix, TTL: cfg.SessionTTL,
		MaxStateBytes: cfg.MaxStateBytes, BufferSize: cfg.TurnBufferSize, MaxDepth: cfg.MaxJSONDepth})
	p.kv = keyvalue.New(pool, rdb, keyvalue.Options{Prefix: cfg.RedisPrefix, MaxValueBytes: cfg.KVMaxValueBytes,
		MaxJSONDepth: cfg.MaxJSONDepth, PendingTTL: cfg.RequestTimeout + 5*time.Second, Log: log, NameHash: pseudo.Hash})
	p.memories = semantic.NewStore(semantic.Options{DedupThreshold: cfg.DedupThreshold, StaleAfter: cfg.VerifyAge,
		EfSearch: cfg.HNSWEfSearch, ExactBelow: cfg.SearchExactBelow, ScopeIndexAbove: cfg.ScopeIndexAbove,
		ScopeEfSearch: cfg.ScopeEfSearch}, nil)
	// Heavy scopes' own HNSW indexes: built by its pass, dropped by erasures. Its connection
	// is the login role's, which owns the tables (the pool acts as strata_app).
	p.graph = graph.NewStore(graph.Options{})
	p.scopeIndexer = &semantic.ScopeIndexer{Store: p.memories, DSN: cfg.DatabaseURL,
		Interval: cfg.ScopeIndexInterval, Max: cfg.ScopeIndexMax, Log: log}
	if cfg.AccessFlush > 0 {
		p.access = semantic.NewAccessLog(pool, log, cfg.AccessFlush, p.metrics)
	}
	p.evictor = &eviction.Evictor{Semantic: p.memories, Episodic: p.events, Jobs: p.jobs, Working: p.working, KV: p.kv,
		Defaults: p.policy, Log: log, Metrics: eviction.NewMetrics(p.metrics, pool)}
	p.consolidator = &consolidation.Consolidator{Pool: pool, Semantic: p.memories, Episodic: p.events, Jobs: p.jobs,
		Embedder: emb, Defaults: p.policy, Log: log, Metrics: consolidation.NewMetrics(p.metrics),
		Restricted: p.restrictions.HeldOn}
	p.jobMetrics = newJobMetrics(p.metrics)
	p.rolling = &consolidation.Rolling{Pool: pool, Working: p.working, Episodic: p.events, Jobs: p.jobs,
		Restricted: p.restrictions.HeldOn, Defaults: p.policy, Every: cfg.SummaryEvery, KeepEvents: cfg.SummaryKeepEvents,
		Tokens: cfg.SummaryTokens, Log: log, Metrics: consolidation.NewRollingMetrics(p.metrics)}
	if cfg.SummaryKeepEvents == 0 {
		p.rolling.KeepEvents = -1
	}
	p.assembler = turncontext.NewAssembler(turncontext.Deps{Jobs: p.jobs, Events: p.events, Working: p.working,
		KV: p.kv, Memories: p.memories, Embedder: emb, Access: p.access, QueuePolicy: policy.QueueLoadEffective,
		PolicyDefaults: p.policy, QueueRestrictionCheck: gdpr.QueueContextCheck, Pool: pool,
		Graph: p.graph, Hide: p.restrictions.Subjects})
	if cfg.LLMModel != "" {
		llm, err := consolidation.NewLLM(consolidation.LLMOptions{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey, Model: cfg.LLMModel, HTTPClient: hc})
		if err != nil {
			return nil, fmt.Errorf("STRATA_LLM_MODEL: %w", err)
		}
		p.consolidator.Summarizer = llm
		if p.rolling.LLM, err = consolidation.NewRollingLLM(consolidation.LLMOptions{BaseURL: cfg.OpenAIBaseURL,
			APIKey: cfg.OpenAIAPIKey, Model: cfg.LLMModel, HTTPClient: hc}); err != nil {
			return nil, fmt.Errorf("STRATA_LLM_MODEL: %w", err)
		}
		p.extractor, err = extraction.New(extraction.LLMOptions{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey,
			Model: cfg.LLMModel, HTTPClient: hc}, extraction.Extractor{Pool: pool, Semantic: p.memories, KV: p.kv, Working: p.working,
			Graph:    p.graph,
			Embedder: emb, Restricted: p.restrictions.HeldOn, Defaults: p.policy, Log: log,
			Metrics: extraction.NewMetrics(p.metrics), ApplyPause: cfg.ExtractionApplyPause})
		if err != nil {
			return nil, err
		}
	}
	if p.erasures, err = gdpr.NewInserter(pool, p.riverMiddleware()...); err != nil {
		return nil, fmt.Errorf("gdpr: River inserter: %w", err)
	}
	// Webhook secrets are sealed with a key derived from the pseudonym key (a secret of the
	// environment, never of the database).
	p.webhooks = webhooks.NewStore([]byte(pseudo.Hash("strata", "webhook-secret-seal")), cfg.WebhookAllowPrivate)
	p.broker = httpapi.NewEventBroker()
	p.metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_draining",
		Help: "1 while this replica drains at shutdown (/readyz answers 503), else 0.",
	}, func() float64 {
		if p.draining.Load() {
			return 1
		}
		return 0
	}))
	return p, nil
}

// riverMiddleware is what every River client of the server runs: with tracing on, jobs
// carry the trace context of the request (or job) that queued them.
func (p *parts) riverMiddleware() []rivertype.Middleware {
	if !p.tracing {
		return nil
	}
	return []rivertype.Middleware{&telemetry.RiverMiddleware{}}
}

// newEmbedder builds the embedder STRATA_EMBEDDER names; hc, when set, is the HTTP client
// of a remote embedder (tracing's).
func newEmbedder(cfg config.Config, hc *http.Client) (embed.Embedder, error) {
	switch cfg.Embedder {
	case "", "hash", "lexical":
		return embed.NewLexical(cfg.EmbeddingDims), nil
	case "openai":
		return embed.NewOpenAI(embed.OpenAIOptions{BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIAPIKey,
			Model: cfg.EmbeddingModel, Dims: cfg.EmbeddingDims, HTTPClient: hc})
	case "onnx":
		return embed.NewONNX(embed.ONNXOptions{Dir: cfg.ONNXModelDir, Dims: cfg.EmbeddingDims, Model: cfg.EmbeddingModel})
	}
	return nil, fmt.Errorf("STRATA_EMBEDDER: unknown embedder %q (hash, lexical, onnx or openai)", cfg.Embedder)
}

// server is the HTTP API on the parts.
func (p *parts) server() *httpapi.Server {
	cfg := p.cfg
	var anchorer *audit.Anchorer
	var auditKeys audit.Keyring
	if p.audit != nil {
		anchorer, auditKeys = p.audit.anchorer, p.audit.keyring
	}
	var tr func(http.Handler) http.Handler
	if p.tracing {
		tr = telemetry.Middleware(func(r *http.Request) string { return httpops.RequestID(r.Context()) })
	}
	return httpapi.NewServer(httpapi.Deps{
		Trace:    tr,
		Anchorer: anchorer, AuditKeys: auditKeys,
		Log: p.log, Metrics: p.metrics, Pool: p.pool, Redis: p.rdb, Keys: p.keys, Pseudo: p.pseudo,
		Restrictions: p.restrictions, Jobs: p.jobs, Events: p.events, JobLog: joblog.New(p.jobs, p.events),
		Working: p.working, KV: p.kv, Memories: p.memories, Graph: p.graph, Embedder: p.emb, Access: p.access, Evictor: p.evictor,
		Consolidator: p.consolidator, Erasures: p.erasures, PolicyDefaults: p.policy,
		Context: p.assembler, Now: time.Now, Replicas: p.replicas,
		Console: func(api http.Handler) http.Handler {
			return console.New(console.Deps{API: api, Keys: p.keys, Log: p.log, Idle: cfg.ConsoleIdle, Absolute: cfg.ConsoleAbsolute})
		},
		Extraction: p.extractor, ExtractionDefaultOn: *p.policy.Extraction.Enabled,
		Webhooks: p.webhooks, WebhookQueue: p.erasures, EventBroker: p.broker, Emitted: p.emitted(),
		Draining: p.draining.Load,
		Options: httpapi.Options{MaxBodyBytes: cfg.MaxBodyBytes, MaxJSONDepth: cfg.MaxJSONDepth,
			RequestTimeout: cfg.RequestTimeout, StoreTimeout: cfg.StoreTimeout, IdempotencyTTL: cfg.IdempotencyTTL,
			IdempotencyWait: cfg.IdempotencyWait, RateLimit: cfg.RateLimit, RateBurst: cfg.RateBurst,
			GroupCommit: cfg.GroupCommit, EventsHeartbeat: cfg.EventsHeartbeat, NoEvents: !cfg.Events,
			SyncReadCommits: cfg.SyncReadCommits},
	})
}

// emitted is what the HTTP API tells once a request that emitted has committed: the waker
// when the server runs its background work, else (NewServer) the SSE broker alone.
func (p *parts) emitted() func(org string) {
	if p.waker == nil {
		return nil
	}
	return p.waker.Emitted
}

// NewServer builds the HTTP API on open pools without listening and without background
// work, for tests that drive the handler directly. Servers that serve use Run.
func NewServer(cfg config.Config, log *slog.Logger, pool *pgxpool.Pool, rdb redis.UniversalClient) (*httpapi.Server, error) {
	p, err := compose(cfg, log, pool, rdb, auth.NewStore(pool, cfg.AdminKey, cfg.AdminOrg), nil, nil, false)
	if err != nil {
		return nil, err
	}
	return p.server(), nil
}
