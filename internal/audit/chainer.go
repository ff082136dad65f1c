package audit

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/service"
)

// Chainer links new audit rows onto their org's chain in the background. Any number of
// replicas may run one: chainers of one org serialise on the chain head row.
type Chainer struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	interval time.Duration
	extraOrg string

	service.StartStop
	// TestSignals fire at points tests wait for; they do nothing unless a test Inits them.
	TestSignals ChainerTestSignals
}

// ChainerTestSignals are the chainer's points of interest for tests.
type ChainerTestSignals struct {
	Chained service.TestSignal[int] // a pass of RunOnce ended; the value is rows chained
}

// NewChainer makes a chainer that runs every interval. extraOrg is an org to chain even if
// it has no API key (the bootstrap admin key's org).
func NewChainer(pool *pgxpool.Pool, log *slog.Logger, interval time.Duration, extraOrg string) *Chainer {
	return &Chainer{pool: pool, log: log, interval: interval, extraOrg: extraOrg}
}

// ChainOrg chains all of org's pending rows now.
func ChainOrg(ctx context.Context, pool *pgxpool.Pool, org string) (int, error) {
	total := 0
	for {
		var n int
		err := pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			var err error
			n, err = Chain(ctx, tx, org, 1000)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}

// RunOnce chains every org's pending rows. Orgs are found through api_keys (every org that
// can write has a key) plus the bootstrap org.
func (c *Chainer) RunOnce(ctx context.Context) (int, error) {
	rows, err := c.pool.Query(ctx, `SELECT DISTINCT org_id FROM api_keys UNION SELECT $1`, c.extraOrg)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	orgs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, pg.Interpret(err)
	}
	total := 0
	for _, org := range orgs {
		n, err := ChainOrg(ctx, c.pool, org)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Start runs the chainer every interval until Stop.
func (c *Chainer) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := c.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		service.Every(ctx, c.interval, func(ctx context.Context) {
			n, err := c.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				c.log.Warn("audit chaining failed; will retry", "err", err)
			}
			c.TestSignals.Chained.Signal(n)
		})
	}()
	return nil
}
