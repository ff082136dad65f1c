package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestChainReadsItsPendingRowsNotTheOrg: linking new rows reads those rows, not the org's
// whole log. On a partition Postgres has not analysed (autovacuum off, or a new tenant's
// first minute) the batch UPDATE joined its ids to every row of the org, so each pass cost
// more as the log grew.
func TestChainReadsItsPendingRowsNotTheOrg(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newAnchorEnv(t)
	e.write(t, 400)
	_, err := audit.ChainOrg(ctx, e.pool, e.org)
	require.NoError(t, err)
	e.write(t, 5)
	var read, linked int
	require.NoError(t, pg.InOrgTx(ctx, e.pool, e.org, func(tx pgx.Tx) error {
		var err error
		read, err = testenv.RowsRead(ctx, tx, "audit_log%", func() error {
			linked, err = audit.Chain(ctx, tx, e.org, 1000)
			return err
		})
		return err
	}))
	require.Equal(t, 5, linked)
	// The pending rows are read twice (to hash them, then to link them): 10. Keyed by org
	// alone, the UPDATE read all 405 of the org's rows: 410.
	require.LessOrEqual(t, read, 2*5+2, "audit rows one chain pass read")
	rep := e.serverVerify(t)
	require.True(t, rep.OK)
	require.Equal(t, int64(405), rep.Checked)
	require.Zero(t, rep.Unchained)
}
