package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

func TestSweepDeletesOnlyExpiredRecordsOfEveryOrg(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	_, err := owner.Exec(ctx, `INSERT INTO api_keys (org_id, id, key_hash, prefix, role) VALUES
		('a', 'ka', '\x01', 'x', 'agent'), ('b', 'kb', '\x02', 'x', 'agent')`)
	require.NoError(t, err)
	for _, org := range []string{"a", "b", "root"} {
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			for i, ttl := range []time.Duration{time.Hour, time.Second} {
				_, err := idempotency.Claim(ctx, tx, org, idempotency.Claimant{Key: "k" + string(rune('0'+i)), Hash: []byte{1},
					Method: "POST", Path: "/x", APIKeyID: "key_1"}, ttl, time.Second)
				if err != nil {
					return err
				}
			}
			return nil
		}))
	}
	w := &idempotency.SweepWorker{Pool: pool, ExtraOrg: "root", Now: func() time.Time { return time.Now().Add(time.Minute) }}
	n, err := w.Sweep(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	var left int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&left))
	require.Equal(t, 3, left)
}
