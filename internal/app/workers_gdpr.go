package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/working"
)

// startGDPRWorkers registers the erasure worker (GDPR Art. 17, internal/gdpr) on workers and
// starts the sweeper that re-enqueues erasures whose worker died (lease expired), at once
// and then every STRATA_ERASURE_LEASE, on every replica. It returns the sweeper's stop
// function (call it at shutdown). Call it before the River client is created.
func startGDPRWorkers(ctx context.Context, workers *river.Workers, cfg config.Config, pool *pgxpool.Pool,
	rdb redis.UniversalClient, pseudo *audit.Pseudonymizer, log *slog.Logger) func() {
	engine := &gdpr.Engine{
		Pool: pool,
		Working: working.New(rdb, pool, working.Options{Prefix: cfg.RedisPrefix, TTL: cfg.SessionTTL,
			MaxStateBytes: cfg.MaxStateBytes, BufferSize: cfg.TurnBufferSize, MaxDepth: cfg.MaxJSONDepth}),
		KV: keyvalue.New(pool, rdb, keyvalue.Options{Prefix: cfg.RedisPrefix, MaxValueBytes: cfg.KVMaxValueBytes,
			MaxJSONDepth: cfg.MaxJSONDepth, PendingTTL: cfg.RequestTimeout + 5*time.Second, Log: log}),
		Pseudo: pseudo, Log: log.With("component", "gdpr"),
		Batch: cfg.ErasureBatch, Pause: cfg.ErasurePause, Lease: cfg.ErasureLease,
	}
	river.AddWorker(workers, &gdpr.ErasureWorker{Engine: engine})
	ins, err := gdpr.NewInserter(pool)
	if err != nil {
		log.Error("gdpr: cannot enqueue erasures; stranded erasures will not be resumed", "err", err)
		return func() {}
	}
	sw := &gdpr.Sweeper{Pool: pool, Inserter: ins, Lease: cfg.ErasureLease, ExtraOrg: cfg.AdminOrg, Log: log.With("component", "gdpr")}
	sw.Start(context.WithoutCancel(ctx))
	return sw.Stop
}
