// Package app assembles and runs the Strata server: config → migrations → stores → HTTP.
// cmd/server's main only calls Run; tests call Run too, on port 0, and wait for /readyz.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/redisconn"
	"github.com/strata-mem/strata/internal/service"
	"github.com/strata-mem/strata/internal/telemetry"
	"github.com/strata-mem/strata/internal/webhooks"
	"github.com/strata-mem/strata/migrations"
)

const usage = `usage: server [serve|migrate|healthcheck|help]

  serve        (default) apply migrations, then serve the API on STRATA_HTTP_ADDR
  migrate      apply migrations and exit ("migrate --status": compare this build's
               migrations with the database's, change nothing; docs/operations.md)
  healthcheck  exit 0 when the server on STRATA_HTTP_ADDR answers /readyz with 200
  reembed      move semantic memory to the embedder the environment names (resumable;
               servers keep serving the old model until the atomic switch);
               "reembed cleanup" then drops the old vectors
  partition    move episodic_events, memories and audit_log to STRATA_PARTITIONS hash
               partitions by org_id while the service keeps serving (resumable; run
               it as a superuser or a BYPASSRLS owner; --keep-old keeps the old tables
               as <table>_unpartitioned_old, --batch N sets the rows per copy batch)

Configuration is read from the environment: STRATA_DATABASE_URL, STRATA_REDIS_URL,
STRATA_HTTP_ADDR, STRATA_ADMIN_KEY, STRATA_EMBEDDER, ... (see README.md).
`

// Run is the whole program. It returns when ctx is cancelled (after a graceful shutdown)
// or on a fatal error.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return RunWith(ctx, args, getenv, stdout, stderr, Hooks{})
}

// Hooks are what a test adds to the server Run starts (apptest); the zero value adds none.
type Hooks struct {
	// PoolTracer sees every statement the primary pool's connections send (a test counts
	// the round trips of one request with it: apptest.RoundTrips).
	PoolTracer pgx.QueryTracer
}

// RunWith is Run with test hooks.
func RunWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, hooks Hooks) error {
	cmd := "serve"
	if len(args) > 1 {
		cmd = args[1]
	}
	switch cmd {
	case "serve", "migrate", "healthcheck", "reembed", "partition":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}

	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr, telemetry.Configured(getenv))
	if cmd == "healthcheck" {
		return healthcheck(ctx, cfg)
	}
	if cmd == "reembed" {
		return reembed(ctx, cfg, log, args, stdout)
	}
	if cmd == "partition" {
		if err := migrate(ctx, cfg, log, false); err != nil {
			return err
		}
		return partitionTables(ctx, cfg, log, args[2:], stdout)
	}

	if cmd == "migrate" && len(args) > 2 {
		return migrateStatus(ctx, cfg, args[2:], stdout, stderr)
	}
	if err := migrate(ctx, cfg, log, cmd == "migrate"); err != nil {
		return err
	}
	if cmd == "migrate" {
		fmt.Fprintln(stdout, "migrations applied")
		return nil
	}
	return serve(ctx, cfg, getenv, log, stdout, hooks)
}

// migrate applies the migrations (explicit: `server migrate`, which has no time limit:
// a concurrent index build may take long). With STRATA_NO_MIGRATE a server only checks
// that its code may run on the schema. Either way a build older than an applied contract
// migration stops here (docs/operations.md).
func migrate(ctx context.Context, cfg config.Config, log *slog.Logger, explicit bool) error {
	if cfg.DisableMigrateOnStart && !explicit {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if _, err := pg.CheckSchema(cctx, cfg.DatabaseURL, migrations.FS, log); err != nil {
			return fmt.Errorf("checking the schema of %s: %w", pg.RedactURL(cfg.DatabaseURL), err)
		}
		return nil
	}
	mctx, cancel := ctx, context.CancelFunc(func() {})
	if !explicit {
		mctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	}
	defer cancel()
	if err := pg.EnsureDatabase(mctx, cfg.DatabaseURL); err != nil {
		return err
	}
	n, err := migrations.ApplyWith(mctx, cfg.DatabaseURL, log, migrations.Options{Partitions: cfg.Partitions})
	if err != nil {
		return fmt.Errorf("migrating %s: %w", pg.RedactURL(cfg.DatabaseURL), err)
	}
	log.Info("schema up to date", "applied", n)
	return nil
}

func serve(ctx context.Context, cfg config.Config, getenv func(string) string, log *slog.Logger, stdout io.Writer, hooks Hooks) error {
	// The last word of a shutdown, once every deferred step below has run.
	var stopping time.Time
	defer func() {
		if !stopping.IsZero() {
			log.Info("shutdown: stopped; exiting", "after", time.Since(stopping).Round(time.Millisecond).String())
		}
	}()
	// shutdownLeft is what a step after the drain may still take: the rest of
	// STRATA_SHUTDOWN_DELAY + STRATA_SHUTDOWN_TIMEOUT from SIGTERM, at least a second. With
	// Postgres hung, stopping the workers and closing the pools would otherwise wait on
	// calls that never end, and the process would outlive its drain.
	shutdownLeft := func() time.Duration {
		if stopping.IsZero() {
			return cfg.ShutdownTimeout
		}
		return max(time.Until(stopping.Add(cfg.ShutdownDelay+cfg.ShutdownTimeout)), time.Second)
	}
	// Tracing (OpenTelemetry, off unless OTEL_EXPORTER_OTLP_ENDPOINT is set). Its flush is the
	// last step of the ordered shutdown (deferred first, so it runs after the workers stop).
	tel, err := telemetry.Setup(ctx, getenv, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("trace spans not flushed at shutdown", "err", err)
		}
	}()
	var pgTracer pgx.QueryTracer
	if tel.Enabled() {
		pgTracer = telemetry.PgxTracer{}
	}
	pool, err := pg.NewPool(ctx, cfg.DatabaseURL, pg.PoolOptions{MaxConns: cfg.DBMaxConns, StatementTimeout: cfg.StoreTimeout * 2, ConnectTimeout: cfg.StoreTimeout,
		Tracer: telemetry.MultiTracer(hooks.PoolTracer, pgTracer)})
	if err != nil {
		return err
	}
	defer func() { closeBounded(log, "postgres pool", pool.Close, shutdownLeft()) }()
	var autovacuum string
	if err := pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err == nil && autovacuum != "on" {
		log.Warn("autovacuum is off on this Postgres: rows Strata updates often (jobs, working sessions, the audit chain, "+
			"step leases) keep their dead versions and requests slow down over hours; turn it on (ALTER SYSTEM SET autovacuum = on; "+
			"SELECT pg_reload_conf())", "autovacuum", autovacuum)
	}
	rdb, err := redisconn.New(cfg.RedisURL, cfg.StoreTimeout)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if tel.Enabled() {
		rdb.AddHook(telemetry.RedisHook{})
	}

	adminKey := cfg.AdminKey
	if adminKey == "" {
		adminKey = auth.NewSecret()
		cfg.AdminKey = adminKey
		fmt.Fprintf(stdout, "STRATA_ADMIN_KEY was not set; generated an admin key for this run:\n  %s\n", adminKey)
	}
	keys := auth.NewStore(pool, adminKey, cfg.AdminOrg)
	restrictions := gdpr.NewRestrictionCache()
	// One connection LISTENs for both caches' invalidations: key revocations and changes
	// to restrictions of processing.
	kl, rl := keys.Listener(), restrictions.Listener()
	// The outbox's notifications (new events of an org: workers' emissions, and other
	// replicas' writes through their Waker) wake the webhook dispatcher and the SSE streams;
	// both also poll, so they need no Up. This server's own requests wake them in-process
	// (waker, below).
	var onEvents, onPeerEvents atomic.Pointer[func(org string)]
	instance := rand.Text()[:16] // this process, in its peer notifications (base32: no spaces)
	listen := &pg.ListenLoop{
		DSN: cfg.DatabaseURL, Channels: []string{auth.RevocationChannel, gdpr.RestrictionChannel, outbox.Channel, outbox.PeerChannel}, Log: log,
		What: "cache invalidation (API key revocations, GDPR restrictions) and events",
		Listener: pg.Listener{
			Up: func(on bool) { kl.Up(on); rl.Up(on) },
			Notify: func(channel, payload string) {
				switch channel {
				case auth.RevocationChannel:
					kl.Notify(channel, payload)
				case gdpr.RestrictionChannel:
					rl.Notify(channel, payload)
				case outbox.Channel:
					if f := onEvents.Load(); f != nil {
						(*f)(payload)
					}
				case outbox.PeerChannel:
					// Another replica's request: its own dispatcher was woken in its process,
					// so only the streams here need waking.
					if from, org := outbox.ParsePeer(payload); from != instance {
						if f := onPeerEvents.Load(); f != nil {
							(*f)(org)
						}
					}
				}
			},
		},
	}
	if err := listen.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("starting the cache invalidation listener: %w", err)
	}
	defer listen.Stop()
	ak, err := loadAuditKeys(ctx, cfg, pool, log, stdout)
	if err != nil {
		return err
	}
	p, err := compose(cfg, log, pool, rdb, keys, ak.pseudo, restrictions, tel.Enabled())
	if err != nil {
		return err
	}
	peerNotify := p.broker.Notify
	onPeerEvents.Store(&peerNotify)
	// A request that emitted wakes this process's dispatcher and streams once it has
	// committed, and the waker tells the other replicas (no NOTIFY in the write's commit).
	p.waker = &outbox.Waker{Pool: pool, Instance: instance, Log: log, Local: func(org string) {
		if f := onEvents.Load(); f != nil {
			(*f)(org)
		}
	}}
	p.audit = ak
	if urls := cfg.Replicas(); len(urls) > 0 {
		rep, err := pg.NewReplicas(ctx, pool, urls, pg.PoolOptions{MaxConns: cfg.DBMaxConns, StatementTimeout: cfg.StoreTimeout * 2, ConnectTimeout: cfg.StoreTimeout,
			Tracer: pgTracer}, pg.ReplicaOptions{MaxLag: cfg.ReplicaMaxLag, Log: log})
		if err != nil {
			return err
		}
		defer func() { closeBounded(log, "postgres replica pools", rep.Close, shutdownLeft()) }()
		if err := rep.Start(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("starting the read replica router: %w", err)
		}
		defer rep.Stop() // after the HTTP server has drained (defers run in reverse)
		p.replicas = rep
	}
	srv := p.server()
	if p.access != nil {
		defer func() { // after its loop has stopped, before the pools close
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
			defer cancel()
			if err := p.access.Shutdown(sctx); err != nil {
				log.Warn("memory access counts not written at shutdown", "err", err)
			}
		}()
	}

	// Background services; stopped after the HTTP server has drained (defers run in
	// reverse, StopAll stops the last started first).
	workers := river.NewWorkers()
	river.AddWorker(workers, &idempotency.SweepWorker{Pool: pool, ExtraOrg: cfg.AdminOrg})
	lifecycle := p.lifecycleWorkers(workers)
	sweeper := p.gdprWorkers(workers)
	dispatcher, watcher := p.eventWorkers(workers)
	notify := func(org string) { dispatcher.Wake(org); p.broker.Notify(org) }
	onEvents.Store(&notify)
	services := []service.Service{p.waker, audit.NewChainer(pool, log, time.Second, cfg.AdminOrg), ak.anchorer, sweeper, watcher}
	if p.access != nil {
		services = append([]service.Service{p.access}, services...)
	}
	services = append(services, p.scopeIndexer)
	if err := service.StartAll(context.WithoutCancel(ctx), services...); err != nil {
		return fmt.Errorf("starting background services: %w", err)
	}
	defer service.StopAll(services...)

	jobs, err := queue.New(pool, log, queue.Config{
		Workers:     workers,
		JobTimeout:  cfg.JobTimeout,
		RescueAfter: cfg.JobRescueAfter,
		LogLevel:    logLevel(cfg.RiverLogLevel),
		Queues:      map[string]int{webhooks.Queue: webhooks.QueueWorkers},
		Middleware:  p.riverMiddleware(),
		PeriodicJobs: append([]*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(10*time.Minute),
				func() (river.JobArgs, *river.InsertOpts) { return idempotency.SweepArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
		}, lifecycle...),
	})
	if err != nil {
		return err
	}
	defer p.subscribeJobMetrics(jobs)()
	if err := jobs.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("starting background workers: %w", err)
	}
	if err := dispatcher.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("starting the webhook dispatcher: %w", err)
	}
	defer dispatcher.Stop() // before the River client stops (defers run in reverse)
	defer func() {
		left := shutdownLeft()
		closeBounded(log, "background workers", func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left)
			defer cancel()
			if err := queue.Stop(sctx, jobs); err != nil {
				log.Warn("stopping background workers", "err", err)
			}
		}, left)
		if !stopping.IsZero() {
			log.Info("shutdown: background workers stopped")
		}
	}()

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("STRATA_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Shutdown closes the listener, then calls this: the event streams end (a retry hint to
	// their clients) instead of holding the drain.
	hs.RegisterOnShutdown(func() {
		log.Info("shutdown: listener closed; ending event streams, draining in-flight requests")
		p.broker.EndStreams()
	})
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	fmt.Fprintf(stdout, "Strata listening on %s\n", displayURL(ln.Addr()))
	log.Info("listening", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Ordered shutdown (docs/reliability.md): /readyz answers 503 for STRATA_SHUTDOWN_DELAY
	// while everything else is served (load balancers take the replica out of rotation) →
	// the listener closes, event streams end, in-flight requests drain (bounded by
	// STRATA_SHUTDOWN_TIMEOUT) → workers stop → pools close (deferred above, in reverse order).
	stopping = time.Now()
	p.draining.Store(true)
	hs.SetKeepAlivesEnabled(false) // each response closes its connection: clients reconnect through the balancer
	log.Info("shutdown: draining started; /readyz answers 503", "delay", cfg.ShutdownDelay.String(),
		"timeout", cfg.ShutdownTimeout.String())
	if cfg.ShutdownDelay > 0 {
		t := time.NewTimer(cfg.ShutdownDelay)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			return fmt.Errorf("serving: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	drain := time.Now()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// Requests still running after the timeout are cut (their contexts end) before
		// the pools they use close.
		log.Warn("shutdown: requests did not drain in time; closing their connections", "err", err,
			"timeout", cfg.ShutdownTimeout.String())
		_ = hs.Close()
	} else {
		log.Info("shutdown: drained", "in", time.Since(drain).Round(time.Millisecond).String())
	}
	return nil
}

// closeBounded runs closeFn, giving up after d: the process exits with what it was
// closing still open (the kernel closes the connections) rather than outlive
// STRATA_SHUTDOWN_DELAY + STRATA_SHUTDOWN_TIMEOUT. A pool's Close waits for every
// connection still checked out, one stuck on a hung Postgres among them.
func closeBounded(log *slog.Logger, what string, closeFn func(), d time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		closeFn()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("shutdown: "+what+" did not stop in time; exiting without waiting", "waited", d.String())
	}
}

func displayURL(a net.Addr) string {
	host, port, _ := net.SplitHostPort(a.String())
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// logLevel parses a validated STRATA_*LOG_LEVEL value (debug, info, warn, error).
func logLevel(s string) slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(s)))
	return level
}

// newLogger is the server's logger; with tracing, each record logged inside a span carries
// its trace_id and span_id.
func newLogger(cfg config.Config, w io.Writer, tracing bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	if tracing {
		h = telemetry.LogHandler(h)
	}
	return slog.New(h)
}

// healthcheck asks the local server's /readyz (for container health checks on images
// without a shell or curl).
func healthcheck(ctx context.Context, cfg config.Config) error {
	_, port, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("STRATA_HTTP_ADDR: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+port+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("server not answering on port %s: %w", port, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: /readyz answered %d", resp.StatusCode)
	}
	return nil
}
