package gdpr_test

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/internal/working"
)

// TestGDPRCoverageRegistry fails when a migration adds a table with a user_id column that
// erasure does not cover (add it to gdpr.Covered, erase it, and document it in
// docs/data-map.md), or when the registry names a table that no longer exists.
func TestGDPRCoverageRegistry(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	rows, err := owner.Query(context.Background(), `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND c.column_name = 'user_id' AND t.table_type = 'BASE TABLE'
		  AND NOT EXISTS (SELECT 1 FROM pg_class k WHERE k.oid = ('public.' || quote_ident(c.table_name))::regclass AND k.relispartition)
		ORDER BY 1`) // a partition's rows are its parent's: erasing the parent covers them
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	covered := map[string]bool{}
	for _, c := range gdpr.Covered {
		covered[c.Table] = true
	}
	for _, tbl := range tables {
		require.Truef(t, covered[tbl], "table %s has a user_id column but GDPR erasure does not cover it: "+
			"add it to gdpr.Covered, erase it in the engine, export it, and document it in docs/data-map.md", tbl)
	}
	sort.Strings(tables)
	for _, c := range gdpr.Covered {
		_, found := sort.Find(len(tables), func(i int) int {
			if c.Table < tables[i] {
				return -1
			} else if c.Table > tables[i] {
				return 1
			}
			return 0
		})
		require.Truef(t, found, "gdpr.Covered names %s, which has no user_id column (any more)", c.Table)
	}
}

func newEngine(t *testing.T, now func() time.Time) (*gdpr.Engine, string) {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &gdpr.Engine{Pool: pool, Pseudo: audit.NewPseudonymizer("k"), Log: log, Batch: 100, Lease: 5 * time.Second, Now: now,
		Working: working.New(pool, rdb, working.Options{Prefix: prefix}),
		KV:      keyvalue.New(pool, rdb, keyvalue.Options{Prefix: prefix, Log: log})}
	return e, dsn
}

// TestGDPRErasureResumesAfterKill stops a worker in the middle of an erasure (its context is
// cancelled between batches, as when the process dies: the lease stays behind), checks that
// another worker cannot take over while the lease lives, then takes it over after the lease
// expired (injected clock) and checks that the erasure completes with exact counts: nothing
// erased twice, nothing missed, and the first worker, back, stops without writing.
func TestGDPRErasureResumesAfterKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var offset time.Duration
	clock := func() time.Time { return time.Now().Add(offset) }
	e, dsn := newEngine(t, clock)
	e.Pause = 5 * time.Millisecond
	const org, user, other = "org1", "u-kill", "u-other"
	const events, memories = 2500, 400
	owner := testenv.OwnerConn(t, dsn)
	for _, u := range []string{user, other} {
		for _, q := range []string{
			`INSERT INTO jobs (org_id, job_id, user_id, progress_at, created_at, updated_at) VALUES ($1, 'job-'||$2, $2, now(), now(), now())`,
			`INSERT INTO episodic_jobs (org_id, job_id, last_seq) VALUES ($1, 'job-'||$2, $3::int)`,
			`INSERT INTO episodic_events (org_id, job_id, seq, op, params, fingerprint, user_id)
				SELECT $1, 'job-'||$2, g, 'edit', jsonb_build_object('n', g, 'who', $2::text), sha256(g::text::bytea), $2
				FROM generate_series(1, $3::int) g`,
			`INSERT INTO memories (org_id, id, root_id, user_id, kind, text, text_hash, trust, embedding, embedder, model, dims, valid_from, updated_at)
				SELECT $1, x, x, $2, 'fact', 'memory ' || g || ' of ' || $2, sha256((g || $2)::bytea), 'agent_inferred',
					array_fill(0.1::real, ARRAY[384])::vector, 'hash', 'm', 384, now(), now()
				FROM (SELECT gen_random_uuid() x, g FROM generate_series(1, $3::int) g) s`,
		} {
			n := events
			if strings.Contains(q, "INTO memories") {
				n = memories
			}
			args := []any{org, u, n}
			if !strings.Contains(q, "$3") {
				args = args[:2]
			}
			_, err := owner.Exec(ctx, q, args...)
			require.NoError(t, err, q)
		}
	}
	// Both users are heavy enough for scope indexes of their own (semantic/scopeindex.go),
	// whose definitions name them: the erasure drops the subject's, and only it.
	scopes := []semantic.HotScope{{OrgID: org, UserID: user, Dims: 384}, {OrgID: org, UserID: other, Dims: 384}}
	rep, err := semantic.EnsureScopeIndexes(ctx, owner, semantic.ScopeIndexOptions{BuildAbove: memories / 2}, scopes)
	require.NoError(t, err)
	require.Len(t, rep.Built, 2)
	e.DropScopeIndexes = (&semantic.ScopeIndexer{DSN: dsn}).DropUser // as the server wires it
	var id string
	require.NoError(t, pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) error {
		er, err := gdpr.CreateErasure(ctx, tx, nil, gdpr.NewErasure{OrgID: org, UserID: user, Subject: e.Pseudo.Subject(org, user),
			RequestedBy: "key1", At: time.Now()})
		id = er.ID
		return err
	}))

	// Worker A: killed after a few batches.
	actx, kill := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(actx, org, id, "worker-a") }()
	require.Eventually(t, func() bool {
		var n int64
		_ = owner.QueryRow(ctx, `SELECT coalesce((progress->>'episodic.events_deleted')::bigint, 0) FROM gdpr_erasures WHERE id = $1`, id).Scan(&n)
		return n >= 500
	}, 30*time.Second, 5*time.Millisecond)
	kill()
	<-done
	var deletedBefore int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT (progress->>'episodic.events_deleted')::bigint FROM gdpr_erasures WHERE id = $1`, id).Scan(&deletedBefore))
	require.Less(t, deletedBefore, int64(events), "the kill came too late to test resumption")

	// Worker B while A's lease lives: refused.
	err = e.Run(ctx, org, id, "worker-b")
	var held *gdpr.LeaseHeldError
	require.ErrorAs(t, err, &held)

	// After the lease expired: B takes over and finishes.
	offset = 10 * time.Second
	require.NoError(t, e.Run(ctx, org, id, "worker-b"))
	var er gdpr.Erasure
	require.NoError(t, pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) error {
		var err error
		er, err = gdpr.GetErasure(ctx, tx, org, id)
		return err
	}))
	require.Equal(t, "completed", er.Status)
	require.Equal(t, 2, er.Attempts)
	require.Equal(t, int64(events), er.Counts["episodic"]["events_deleted"], "every event erased exactly once across the two workers")
	require.Equal(t, int64(memories), er.Counts["semantic"]["memories"])
	require.Equal(t, int64(1), er.Counts["semantic"]["scope_indexes"])
	var left []string
	require.NoError(t, owner.QueryRow(ctx, `SELECT coalesce(array_agg(relname::text), '{}') FROM pg_class WHERE relname = ANY($1)`,
		[]string{scopes[0].IndexName(), scopes[1].IndexName()}).Scan(&left))
	require.Equal(t, []string{scopes[1].IndexName()}, left, "the subject's scope index is gone, the other user's stays")
	require.Equal(t, int64(1), er.Counts["jobs"]["jobs"])
	require.NotNil(t, er.Verification)
	require.True(t, er.Verification.Clean, "%v", er.Verification.Remaining)
	require.Empty(t, er.UserID, "the raw subject id is cleared once the erasure completed")

	// A comes back (a stale River retry): the erasure is complete, nothing to do.
	require.NoError(t, e.Run(ctx, org, id, "worker-a"))

	for _, q := range []string{`SELECT count(*) FROM episodic_events WHERE user_id = $1`, `SELECT count(*) FROM memories WHERE user_id = $1`,
		`SELECT count(*) FROM jobs WHERE user_id = $1`} {
		var n int64
		require.NoError(t, owner.QueryRow(ctx, q, user).Scan(&n))
		require.Zero(t, n, q)
		require.NoError(t, owner.QueryRow(ctx, q, other).Scan(&n))
		require.NotZero(t, n, "the other subject is untouched: %s", q)
	}
	var n int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM episodic_events WHERE user_id = $1`, other).Scan(&n))
	require.Equal(t, int64(events), n)
}
