// Package config reads the operator's environment (DESIGN.md, operator contract) into one
// struct, applies the defaults that make a local run work, and validates it with messages
// that name the variable to fix.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Config is everything the server reads from its environment.
type Config struct {
	DatabaseURL string `env:"STRATA_DATABASE_URL" envDefault:"postgres://postgres@127.0.0.1:5432/strata?sslmode=disable"`
	RedisURL    string `env:"STRATA_REDIS_URL" envDefault:"redis://127.0.0.1:6379/0"`
	// ReplicaURLs are Postgres streaming standbys (comma-separated postgres:// URLs) that
	// serve the reads that tolerate lag (docs/scaling.md, "Read replicas"); none: every read
	// on the primary. ReplicaMaxLag is how far behind a standby may be and still serve.
	ReplicaURLs   string        `env:"STRATA_DATABASE_REPLICA_URL"`
	ReplicaMaxLag time.Duration `env:"STRATA_REPLICA_MAX_LAG" envDefault:"2s"`
	HTTPAddr      string        `env:"STRATA_HTTP_ADDR" envDefault:":8080"`
	// AdminKey is accepted as-is as an admin of every org. When empty a key is generated
	// at start and printed (local runs).
	AdminKey string `env:"STRATA_ADMIN_KEY"`
	// AdminOrg is the org the bootstrap admin key acts in for data-plane calls.
	AdminOrg string `env:"STRATA_ADMIN_ORG" envDefault:"default"`
	// Env is development (keys may be generated at start and printed) or production (the
	// audit keys below are required).
	Env string `env:"STRATA_ENV" envDefault:"development"`

	// Audit keys (docs/compliance.md, "Keys"); never stored in the database. Each is a value
	// or a file path (a value starting with "/", "./" or "file:").
	// AuditSigningKey is the Ed25519 private key that signs chain anchors: PEM (PKCS #8) or
	// base64 of the 32-byte seed.
	AuditSigningKey string `env:"STRATA_AUDIT_SIGNING_KEY"`
	// AuditVerifyKeys are more Ed25519 public keys (comma-separated: base64 or PEM files)
	// whose anchors verify: the public halves of previous signing keys.
	AuditVerifyKeys string `env:"STRATA_AUDIT_VERIFY_KEYS"`
	// PseudonymKey keys the HMAC that turns user ids into audit pseudonyms (hex, at least 16
	// bytes, or any string of 32+ characters).
	PseudonymKey string `env:"STRATA_PSEUDONYM_KEY"`
	// PseudonymPreviousKeys (comma-separated) keep pseudonyms made before a rotation
	// resolvable: lookups by user id match them too.
	PseudonymPreviousKeys string `env:"STRATA_PSEUDONYM_PREVIOUS_KEYS"`
	// AuditAnchorFile is a file every anchor is appended to as one JSON line ("" : none).
	AuditAnchorFile string `env:"STRATA_AUDIT_ANCHOR_FILE"`
	// AuditAnchorInterval is how often chain heads that grew are signed (0: only on demand).
	AuditAnchorInterval time.Duration `env:"STRATA_AUDIT_ANCHOR_INTERVAL" envDefault:"1m"`

	Embedder       string `env:"STRATA_EMBEDDER" envDefault:"hash"`
	OpenAIBaseURL  string `env:"OPENAI_BASE_URL"`
	OpenAIAPIKey   string `env:"OPENAI_API_KEY"`
	EmbeddingModel string `env:"STRATA_EMBEDDING_MODEL"`
	EmbeddingDims  int    `env:"STRATA_EMBEDDING_DIMS" envDefault:"384"`
	ONNXModelDir   string `env:"STRATA_ONNX_MODEL_DIR"`
	LLMModel       string `env:"STRATA_LLM_MODEL"`
	LogLevel       string `env:"STRATA_LOG_LEVEL" envDefault:"info"`
	LogFormat      string `env:"STRATA_LOG_FORMAT" envDefault:"json"`
	RedisPrefix    string `env:"STRATA_REDIS_PREFIX" envDefault:"strata:"`
	MaxBodyBytes   int64  `env:"STRATA_MAX_BODY_BYTES" envDefault:"1048576"`
	MaxJSONDepth   int    `env:"STRATA_MAX_JSON_DEPTH" envDefault:"64"`
	DBMaxConns     int32  `env:"STRATA_DB_MAX_CONNS" envDefault:"32"`

	// RiverLogLevel is the least severe record of the job queue's own (River) that is
	// logged: warn by default, since River reports job counts at info every 5 s.
	RiverLogLevel string `env:"STRATA_RIVER_LOG_LEVEL" envDefault:"warn"`
	// GroupCommit writes concurrent event appends of one org in one transaction.
	GroupCommit bool `env:"STRATA_GROUP_COMMIT" envDefault:"true"`
	// SyncReadCommits makes the commits of reads (memory search, similar jobs, /v1/context)
	// wait for the WAL flush like writes do. Off by default: a read's commit holds only its
	// own bookkeeping (audit row, served-memories log), durable within wal_writer_delay
	// (pg.Session.NoFlushCommit; docs/semantic.md).
	SyncReadCommits bool `env:"STRATA_SYNC_READ_COMMITS" envDefault:"false"`
	// AccessFlush is how often the memory access counts that searches and context add up
	// are written (one statement per org); 0 counts them in each request's transaction.
	AccessFlush time.Duration `env:"STRATA_ACCESS_FLUSH" envDefault:"1s"`
	// RateLimit is requests per second per API key on each replica (0 = unlimited);
	// RateBurst is how far a key may run ahead of it.
	RateLimit       float64       `env:"STRATA_RATE_LIMIT" envDefault:"2000"`
	RateBurst       int           `env:"STRATA_RATE_BURST" envDefault:"4000"`
	ShutdownTimeout time.Duration `env:"STRATA_SHUTDOWN_TIMEOUT" envDefault:"20s"`
	RequestTimeout  time.Duration `env:"STRATA_REQUEST_TIMEOUT" envDefault:"30s"`
	StoreTimeout    time.Duration `env:"STRATA_STORE_TIMEOUT" envDefault:"5s"`
	IdempotencyTTL  time.Duration `env:"STRATA_IDEMPOTENCY_TTL" envDefault:"24h"`
	// IdempotencyWait is how long a request waits for a concurrent request with the same
	// Idempotency-Key before it is answered 409.
	IdempotencyWait time.Duration `env:"STRATA_IDEMPOTENCY_WAIT" envDefault:"10s"`
	// ShutdownDelay is how long a replica that got SIGTERM (or SIGINT) keeps serving with
	// /readyz answering 503, so load balancers stop routing to it, before it closes its
	// listener and drains (docs/reliability.md); 0 drains at once.
	ShutdownDelay time.Duration `env:"STRATA_SHUTDOWN_DELAY" envDefault:"5s"`
	// JobTimeout bounds one run of a background job whose worker names no timeout of its
	// own; JobRescueAfter is how long a job may stay running before River's rescuer takes it
	// for stuck (its process died, or a cut kept its completion from being written) and
	// retries it. It must exceed JobTimeout (docs/workers.md).
	JobTimeout     time.Duration `env:"STRATA_JOB_TIMEOUT" envDefault:"5m"`
	JobRescueAfter time.Duration `env:"STRATA_JOB_RESCUE_AFTER" envDefault:"6m"`

	// Working memory (Redis).
	SessionTTL      time.Duration `env:"STRATA_SESSION_TTL" envDefault:"24h"`
	MaxStateBytes   int           `env:"STRATA_MAX_STATE_BYTES" envDefault:"262144"`
	TurnBufferSize  int           `env:"STRATA_TURN_BUFFER" envDefault:"50"`
	KVMaxValueBytes int           `env:"STRATA_KV_MAX_VALUE_BYTES" envDefault:"65536"`
	StalledAfter    time.Duration `env:"STRATA_STALLED_AFTER" envDefault:"15m"`
	// The web console's sessions end after ConsoleIdle without a request, and ConsoleAbsolute after sign-in.
	ConsoleIdle           time.Duration `env:"STRATA_CONSOLE_IDLE" envDefault:"30m"`
	ConsoleAbsolute       time.Duration `env:"STRATA_CONSOLE_ABSOLUTE" envDefault:"12h"`
	DisableMigrateOnStart bool          `env:"STRATA_NO_MIGRATE"`
	// Partitions is the hash-partition count of episodic_events, memories and audit_log
	// (0: unpartitioned). Migration 0033 reads it once, when it runs; `server partition`
	// moves a database that already holds rows (docs/scaling.md, "Partitioned tables").
	Partitions int `env:"STRATA_PARTITIONS" envDefault:"16"`

	// Semantic memory (docs/semantic.md).
	DedupThreshold   float64       `env:"STRATA_DEDUP_THRESHOLD" envDefault:"0.92"`
	VerifyAge        time.Duration `env:"STRATA_VERIFY_AGE" envDefault:"2160h"`
	HNSWEfSearch     int           `env:"STRATA_HNSW_EF_SEARCH" envDefault:"100"`
	SearchExactBelow int           `env:"STRATA_SEARCH_EXACT_BELOW" envDefault:"5000"`
	// A user scope searched with more than ScopeIndexAbove memories gets an HNSW index of
	// its own, built by a pass every ScopeIndexInterval (0: never), at most ScopeIndexMax
	// in the database (docs/semantic.md, "Heavy scopes").
	ScopeIndexAbove    int           `env:"STRATA_SCOPE_INDEX_ABOVE" envDefault:"1000"`
	ScopeIndexInterval time.Duration `env:"STRATA_SCOPE_INDEX_INTERVAL" envDefault:"1m"`
	ScopeIndexMax      int           `env:"STRATA_SCOPE_INDEX_MAX" envDefault:"64"`
	ScopeEfSearch      int           `env:"STRATA_SCOPE_EF_SEARCH" envDefault:"40"`

	// Consolidation and eviction workers (docs/workers.md). STRATA_LLM_MODEL (above), with
	// OPENAI_BASE_URL and OPENAI_API_KEY, makes job summaries LLM-written.
	OutboxPoll            time.Duration `env:"STRATA_OUTBOX_POLL" envDefault:"5s"`
	ConsolidationInterval time.Duration `env:"STRATA_CONSOLIDATION_INTERVAL" envDefault:"1h"`
	EvictionInterval      time.Duration `env:"STRATA_EVICTION_INTERVAL" envDefault:"1h"`

	// GDPR erasure (docs/compliance.md): rows per batch transaction, the pause between
	// batches (throttles an erasure's load), and the worker lease (a killed worker's erasure
	// is taken over when its lease expires).
	ErasureBatch int           `env:"STRATA_ERASURE_BATCH" envDefault:"1000"`
	ErasurePause time.Duration `env:"STRATA_ERASURE_PAUSE" envDefault:"0s"`
	ErasureLease time.Duration `env:"STRATA_ERASURE_LEASE" envDefault:"30s"`

	// Conversation memory (docs/extraction.md): with STRATA_LLM_MODEL set, facts and
	// preferences are extracted from session turns for orgs whose policy turns it on. The
	// dispatcher looks for due sessions every STRATA_EXTRACTION_POLL;
	// STRATA_EXTRACTION_APPLY_PAUSE (tests only) sleeps between applied decisions.
	ExtractionPoll       time.Duration `env:"STRATA_EXTRACTION_POLL" envDefault:"1s"`
	ExtractionApplyPause time.Duration `env:"STRATA_EXTRACTION_APPLY_PAUSE" envDefault:"0s"`

	// Rolling summaries (docs/summaries.md): every STRATA_SUMMARY_POLL a dispatcher finds
	// sessions with at least STRATA_SUMMARY_EVERY turns spilled past the turn buffer beyond
	// their summary, and jobs with as many events beyond their summary and their newest
	// STRATA_SUMMARY_KEEP_EVENTS; a River job folds them into a new summary version of at
	// most STRATA_SUMMARY_TOKENS tokens (the LLM's with STRATA_LLM_MODEL, else extractive).
	SummaryPoll       time.Duration `env:"STRATA_SUMMARY_POLL" envDefault:"2s"`
	SummaryEvery      int           `env:"STRATA_SUMMARY_EVERY" envDefault:"20"`
	SummaryKeepEvents int           `env:"STRATA_SUMMARY_KEEP_EVENTS" envDefault:"50"`
	SummaryTokens     int           `env:"STRATA_SUMMARY_TOKENS" envDefault:"400"`
	// Events (docs/events.md): the watcher's pass for stalled jobs and erasure deadlines;
	// webhook delivery (attempts before the dead-letter state, the first retry's backoff,
	// doubling to at most an hour, the request timeout); whether webhook URLs may resolve
	// to loopback, link-local or private addresses (tests, private networks); the SSE
	// heartbeat comment's interval.
	Events              bool          `env:"STRATA_EVENTS" envDefault:"true"`
	EventsWatchInterval time.Duration `env:"STRATA_EVENTS_WATCH_INTERVAL" envDefault:"15s"`
	EventsRetention     time.Duration `env:"STRATA_EVENTS_RETENTION" envDefault:"168h"`
	WebhookMaxAttempts  int           `env:"STRATA_WEBHOOK_MAX_ATTEMPTS" envDefault:"12"`
	WebhookBackoff      time.Duration `env:"STRATA_WEBHOOK_BACKOFF" envDefault:"5s"`
	WebhookTimeout      time.Duration `env:"STRATA_WEBHOOK_TIMEOUT" envDefault:"10s"`
	WebhookAllowPrivate bool          `env:"STRATA_WEBHOOK_ALLOW_PRIVATE"`
	EventsHeartbeat     time.Duration `env:"STRATA_EVENTS_HEARTBEAT" envDefault:"15s"`
}

// Load reads the environment through getenv (os.Getenv in main, a map in tests).
func Load(getenv func(string) string) (Config, error) {
	var c Config
	err := env.ParseWithOptions(&c, env.Options{
		Environment: environ(getenv, c),
	})
	if err != nil {
		var agg env.AggregateError
		if errors.As(err, &agg) {
			msgs := make([]string, 0, len(agg.Errors))
			for _, e := range agg.Errors {
				var pe env.ParseError
				if errors.As(e, &pe) {
					if f, ok := reflect.TypeOf(c).FieldByName(pe.Name); ok {
						e = fmt.Errorf("%s: cannot parse as %s", f.Tag.Get("env"), pe.Type)
					}
				}
				msgs = append(msgs, e.Error())
			}
			return c, fmt.Errorf("invalid configuration: %s", strings.Join(msgs, "; "))
		}
		return c, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, c.Validate()
}

// environ turns getenv into the map env wants, for the variables Config names. An empty
// value counts as unset, so the default applies.
func environ(getenv func(string) string, c Config) map[string]string {
	m := map[string]string{}
	params, _ := env.GetFieldParams(&c)
	for _, p := range params {
		if v := getenv(p.Key); v != "" {
			m[p.Key] = v
		}
	}
	return m
}

// Replicas are the read replicas' URLs of STRATA_DATABASE_REPLICA_URL.
func (c Config) Replicas() []string {
	var out []string
	for _, r := range strings.Split(c.ReplicaURLs, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// DevKeyPrefix starts admin keys that are published for development (docker-compose.yml's
// default): production refuses them.
const DevKeyPrefix = "sk_dev_"

// Validate checks what the types alone cannot, naming the variable to fix.
func (c Config) Validate() error {
	var errs []string
	bad := func(name, format string, args ...any) {
		errs = append(errs, name+": "+fmt.Sprintf(format, args...))
	}
	if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("STRATA_DATABASE_URL", "must be a postgres:// URL, got %q", c.DatabaseURL)
	}
	for _, r := range c.Replicas() {
		if u, err := url.Parse(r); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad("STRATA_DATABASE_REPLICA_URL", "must be comma-separated postgres:// URLs")
			break
		}
	}
	if c.ReplicaMaxLag <= 0 {
		bad("STRATA_REPLICA_MAX_LAG", "must be a positive duration, got %s", c.ReplicaMaxLag)
	}
	if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		bad("STRATA_REDIS_URL", "must be a redis://, rediss:// or unix:// URL, got %q", c.RedisURL)
	}
	if !strings.Contains(c.HTTPAddr, ":") {
		bad("STRATA_HTTP_ADDR", "must be host:port or :port, got %q", c.HTTPAddr)
	}
	if c.AdminKey != "" && len(c.AdminKey) < 16 {
		bad("STRATA_ADMIN_KEY", "must be at least 16 characters")
	}
	switch c.Embedder {
	case "hash", "lexical", "onnx", "openai":
	default:
		bad("STRATA_EMBEDDER", "must be hash (alias lexical), onnx or openai, got %q", c.Embedder)
	}
	if c.Embedder == "openai" && c.EmbeddingModel == "" {
		bad("STRATA_EMBEDDING_MODEL", "is required when STRATA_EMBEDDER=openai")
	}
	if c.Embedder == "onnx" && c.ONNXModelDir == "" {
		bad("STRATA_ONNX_MODEL_DIR", "is required when STRATA_EMBEDDER=onnx")
	}
	if c.EmbeddingDims < 8 || c.EmbeddingDims > 4096 {
		bad("STRATA_EMBEDDING_DIMS", "must be between 8 and 4096, got %d", c.EmbeddingDims)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		bad("STRATA_LOG_LEVEL", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	switch strings.ToLower(c.RiverLogLevel) {
	case "debug", "info", "warn", "error":
	default:
		bad("STRATA_RIVER_LOG_LEVEL", "must be debug, info, warn or error, got %q", c.RiverLogLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		bad("STRATA_LOG_FORMAT", "must be json or text, got %q", c.LogFormat)
	}
	if c.MaxBodyBytes < 1024 {
		bad("STRATA_MAX_BODY_BYTES", "must be at least 1024, got %d", c.MaxBodyBytes)
	}
	if c.AdminOrg == "" || !validOrg(c.AdminOrg) {
		bad("STRATA_ADMIN_ORG", "must be 1-200 characters of A-Z a-z 0-9 . _ : -")
	}
	for name, d := range map[string]time.Duration{
		"STRATA_SHUTDOWN_TIMEOUT": c.ShutdownTimeout, "STRATA_REQUEST_TIMEOUT": c.RequestTimeout,
		"STRATA_STORE_TIMEOUT": c.StoreTimeout, "STRATA_IDEMPOTENCY_TTL": c.IdempotencyTTL,
		"STRATA_SESSION_TTL": c.SessionTTL, "STRATA_STALLED_AFTER": c.StalledAfter,
		"STRATA_CONSOLE_IDLE": c.ConsoleIdle, "STRATA_CONSOLE_ABSOLUTE": c.ConsoleAbsolute,
	} {
		if d <= 0 {
			bad(name, "must be a positive duration such as 30s or 24h")
		}
	}
	if c.ShutdownDelay < 0 {
		bad("STRATA_SHUTDOWN_DELAY", "must be 0 (drain at once) or a positive duration such as 5s")
	}
	if c.JobTimeout <= 0 {
		bad("STRATA_JOB_TIMEOUT", "must be a positive duration such as 5m")
	}
	if c.JobRescueAfter <= c.JobTimeout {
		bad("STRATA_JOB_RESCUE_AFTER", "must be longer than STRATA_JOB_TIMEOUT (%s), or a job still running would be "+
			"taken for stuck and run twice; got %s", c.JobTimeout, c.JobRescueAfter)
	}
	if c.TurnBufferSize < 1 {
		bad("STRATA_TURN_BUFFER", "must be at least 1")
	}
	if c.MaxStateBytes < 64 {
		bad("STRATA_MAX_STATE_BYTES", "must be at least 64")
	}
	if c.RateLimit < 0 {
		bad("STRATA_RATE_LIMIT", "must be 0 (unlimited) or a positive number of requests per second")
	}
	if c.RateLimit > 0 && c.RateBurst < 1 {
		bad("STRATA_RATE_BURST", "must be at least 1")
	}
	if c.Partitions < 0 || c.Partitions > 1024 {
		bad("STRATA_PARTITIONS", "must be 0..1024 (0 leaves the big tables unpartitioned), got %d", c.Partitions)
	}
	if c.DBMaxConns < 2 {
		bad("STRATA_DB_MAX_CONNS", "must be at least 2")
	}
	if c.DedupThreshold <= 0 || c.DedupThreshold > 1 {
		bad("STRATA_DEDUP_THRESHOLD", "must be a cosine similarity in (0, 1], got %v", c.DedupThreshold)
	}
	if c.VerifyAge <= 0 {
		bad("STRATA_VERIFY_AGE", "must be a positive duration such as 2160h")
	}
	if c.HNSWEfSearch < 1 || c.HNSWEfSearch > 1000 {
		bad("STRATA_HNSW_EF_SEARCH", "must be between 1 and 1000, got %d", c.HNSWEfSearch)
	}
	if c.AccessFlush < 0 {
		bad("STRATA_ACCESS_FLUSH", "must be 0 (count in each request) or a positive duration such as 1s")
	}
	if c.SearchExactBelow < 0 {
		bad("STRATA_SEARCH_EXACT_BELOW", "must not be negative")
	}
	for name, d := range map[string]time.Duration{"STRATA_OUTBOX_POLL": c.OutboxPoll,
		"STRATA_CONSOLIDATION_INTERVAL": c.ConsolidationInterval, "STRATA_EVICTION_INTERVAL": c.EvictionInterval} {
		if d < time.Second {
			bad(name, "must be a duration of at least 1s such as 5s or 1h")
		}
	}
	for name, d := range map[string]time.Duration{"STRATA_EVENTS_WATCH_INTERVAL": c.EventsWatchInterval,
		"STRATA_WEBHOOK_BACKOFF": c.WebhookBackoff, "STRATA_WEBHOOK_TIMEOUT": c.WebhookTimeout,
		"STRATA_EVENTS_HEARTBEAT": c.EventsHeartbeat, "STRATA_EVENTS_RETENTION": c.EventsRetention} {
		if d < 10*time.Millisecond {
			bad(name, "must be a duration of at least 10ms such as 15s")
		}
	}
	if c.WebhookMaxAttempts < 1 || c.WebhookMaxAttempts > 100 {
		bad("STRATA_WEBHOOK_MAX_ATTEMPTS", "must be between 1 and 100, got %d", c.WebhookMaxAttempts)
	}
	if c.ErasureBatch < 1 || c.ErasureBatch > 100000 {
		bad("STRATA_ERASURE_BATCH", "must be between 1 and 100000, got %d", c.ErasureBatch)
	}
	if c.ExtractionPoll <= 0 {
		bad("STRATA_EXTRACTION_POLL", "must be a positive duration")
	}
	if c.SummaryPoll <= 0 {
		bad("STRATA_SUMMARY_POLL", "must be a positive duration")
	}
	if c.SummaryEvery < 1 || c.SummaryEvery > 100000 {
		bad("STRATA_SUMMARY_EVERY", "must be between 1 and 100000, got %d", c.SummaryEvery)
	}
	if c.SummaryKeepEvents < 0 || c.SummaryKeepEvents > 100000 {
		bad("STRATA_SUMMARY_KEEP_EVENTS", "must be between 0 and 100000, got %d", c.SummaryKeepEvents)
	}
	if c.SummaryTokens < 50 || c.SummaryTokens > 8000 {
		bad("STRATA_SUMMARY_TOKENS", "must be between 50 and 8000, got %d", c.SummaryTokens)
	}
	if c.ExtractionApplyPause < 0 {
		bad("STRATA_EXTRACTION_APPLY_PAUSE", "must not be negative")
	}
	if c.ErasurePause < 0 {
		bad("STRATA_ERASURE_PAUSE", "must not be negative")
	}
	if c.ErasureLease < time.Second {
		bad("STRATA_ERASURE_LEASE", "must be at least 1s")
	}
	switch c.Env {
	case "development":
	case "production":
		if c.AuditSigningKey == "" {
			bad("STRATA_AUDIT_SIGNING_KEY", "is required when STRATA_ENV=production: an Ed25519 private key or its file "+
				"(generate one with `strata audit keygen` or `openssl genpkey -algorithm ed25519 -out signing.pem`)")
		}
		if c.PseudonymKey == "" {
			bad("STRATA_PSEUDONYM_KEY", "is required when STRATA_ENV=production: 32+ random bytes in hex or its file "+
				"(`strata audit keygen` prints one; upgrading? see docs/compliance.md, \"Keys\")")
		}
		if strings.HasPrefix(c.AdminKey, DevKeyPrefix) {
			bad("STRATA_ADMIN_KEY", "is a public development key (%s…, docker-compose.yml's default); "+
				"set a secret one when STRATA_ENV=production", DevKeyPrefix)
		}
	default:
		bad("STRATA_ENV", "must be development or production, got %q", c.Env)
	}
	if c.PseudonymKey != "" && !strings.HasPrefix(c.PseudonymKey, "/") && !strings.HasPrefix(c.PseudonymKey, "./") &&
		!strings.HasPrefix(c.PseudonymKey, "file:") && len(c.PseudonymKey) < 32 {
		bad("STRATA_PSEUDONYM_KEY", "must be at least 32 characters (hex of 16+ random bytes) or a file path")
	}
	if c.AuditAnchorInterval < 0 || (c.AuditAnchorInterval > 0 && c.AuditAnchorInterval < time.Second) {
		bad("STRATA_AUDIT_ANCHOR_INTERVAL", "must be 0 (on demand only) or a duration of at least 1s such as 1m")
	}
	if len(errs) > 0 {
		return errors.New("invalid configuration: " + strings.Join(errs, "; "))
	}
	return nil
}

func validOrg(s string) bool {
	if len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)) {
			return false
		}
	}
	return true
}
