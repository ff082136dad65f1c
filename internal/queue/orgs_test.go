package queue_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/queue"
	"github.com/strata-mem/strata/internal/testenv"
)

type orgArgs struct {
	Org string `json:"org"`
}

func (orgArgs) Kind() string { return "queue_test_org" }

type orgWorker struct{ river.WorkerDefaults[orgArgs] }

func (orgWorker) Work(context.Context, *river.Job[orgArgs]) error { return nil }

// Orgs lists every org with a key plus the extra one; InsertPerOrg queues one job per org,
// and a second schedule in the same period (another replica, an overlapping run) queues
// none again.
func TestInsertPerOrgOncePerPeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	_, err := owner.Exec(ctx, `INSERT INTO api_keys (org_id, id, key_hash, prefix, role) VALUES
		('org-b', 'k1', 'h1', 'p', 'agent'), ('org-b', 'k2', 'h2', 'p', 'admin'), ('org-a', 'k3', 'h3', 'p', 'agent')`)
	require.NoError(t, err)

	orgs, err := queue.Orgs(ctx, pool, "")
	require.NoError(t, err)
	require.Equal(t, []string{"org-a", "org-b"}, orgs)
	orgs, err = queue.Orgs(ctx, pool, "org-a")
	require.NoError(t, err)
	require.Equal(t, []string{"org-a", "org-b"}, orgs)

	workers := river.NewWorkers()
	river.AddWorker(workers, &orgWorker{})
	var clients []*queue.Client
	for range 2 {
		c, err := queue.New(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), queue.Config{Workers: workers})
		require.NoError(t, err)
		clients = append(clients, c)
	}
	for _, c := range clients {
		n, err := queue.InsertPerOrg(ctx, c, pool, "admin-org", time.Hour, func(org string) orgArgs { return orgArgs{Org: org} })
		require.NoError(t, err)
		require.Equal(t, 3, n)
	}
	var got []string
	rows, err := pool.Query(ctx, `SELECT args->>'org' FROM river_job WHERE kind = 'queue_test_org' ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var o string
		require.NoError(t, rows.Scan(&o))
		got = append(got, o)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"admin-org", "org-a", "org-b"}, got)
}
