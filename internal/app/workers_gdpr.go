package app

import (
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/gdpr"
)

// gdprWorkers registers the erasure worker (GDPR Art. 17, internal/gdpr) on workers and
// returns the sweeper that re-enqueues erasures whose worker died (lease expired), at once and
// then every STRATA_ERASURE_LEASE, on every replica; serve starts and stops it with the other
// background services. Call it before the River client is created.
func (p *parts) gdprWorkers(workers *river.Workers) *gdpr.Sweeper {
	cfg, pool, log := p.cfg, p.pool, p.log
	engine := &gdpr.Engine{
		Pool: pool, Working: p.working, KV: p.kv,
		Pseudo: p.pseudo, Log: log.With("component", "gdpr"),
		Batch: cfg.ErasureBatch, Pause: cfg.ErasurePause, Lease: cfg.ErasureLease,
	}
	engine.DropScopeIndexes = p.scopeIndexer.DropUser
	river.AddWorker(workers, &gdpr.ErasureWorker{Engine: engine})
	return &gdpr.Sweeper{Pool: pool, Inserter: p.erasures, Lease: cfg.ErasureLease, ExtraOrg: cfg.AdminOrg, Log: log.With("component", "gdpr")}
}
