package semantic_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestEnsureIndexOnPartitionedMemories: on a partitioned memories (the default layout,
// migrations/0033) a concurrent build cannot run on the parent, so EnsureIndex builds
// each partition's index concurrently and attaches it; the parent index ends valid, with
// one valid child per partition. A run interrupted between a child's build and its attach
// (and one that left a half-built child) is finished by the next; a rerun changes nothing.
func TestEnsureIndexOnPartitionedMemories(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	var parts int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'memories'::regclass`).Scan(&parts))
	require.Greater(t, parts, 1, "the template is partitioned")

	check := func(name string) {
		t.Helper()
		var valid bool
		var children, validChildren int
		require.NoError(t, owner.QueryRow(ctx, `SELECT i.indisvalid,
				(SELECT count(*) FROM pg_inherits h WHERE h.inhparent = i.indexrelid),
				(SELECT count(*) FROM pg_inherits h JOIN pg_index c ON c.indexrelid = h.inhrelid WHERE h.inhparent = i.indexrelid AND c.indisvalid)
			FROM pg_index i WHERE i.indexrelid = $1::regclass`, name).Scan(&valid, &children, &validChildren))
		require.True(t, valid, "%s is valid", name)
		require.Equal(t, parts, children)
		require.Equal(t, parts, validChildren)
	}

	require.NoError(t, semantic.EnsureIndex(ctx, owner, "embedding", 64, true))
	check("memories_hnsw_64")
	require.NoError(t, semantic.EnsureIndex(ctx, owner, "embedding", 64, true), "a rerun is a no-op")
	check("memories_hnsw_64")

	// Interrupted: the parent exists ON ONLY, one partition's index is built but not
	// attached, another's is an invalid leftover of a failed concurrent build.
	_, err := owner.Exec(ctx, `CREATE INDEX memories_hnsw_next_32 ON ONLY memories USING hnsw ((embedding_next::vector(32)) vector_cosine_ops) WHERE next_dims = 32`)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `CREATE INDEX memories_p0_memories_hnsw_next_32 ON memories_p0 USING hnsw ((embedding_next::vector(32)) vector_cosine_ops) WHERE next_dims = 32`)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `CREATE INDEX memories_p1_memories_hnsw_next_32 ON memories_p1 USING hnsw ((embedding_next::vector(32)) vector_cosine_ops) WHERE next_dims = 32`)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'memories_p1_memories_hnsw_next_32'::regclass`)
	require.NoError(t, err)
	require.NoError(t, semantic.EnsureIndex(ctx, owner, "embedding_next", 32, true))
	check("memories_hnsw_next_32")

	// Not concurrently: one statement on the parent builds them all.
	require.NoError(t, semantic.EnsureIndex(ctx, owner, "embedding", 48, false))
	check("memories_hnsw_48")
}

// TestMemoriesKeepVectorsInTheirRows (migrations/0045): every memories partition carries
// fillfactor 70 and toast_tuple_target 8160, and a 384-dim memory whose row is past
// Postgres's ~2 KB toast threshold keeps its vector in the row — nothing goes to a TOAST
// table, so an exact search reads no TOAST page.
func TestMemoriesKeepVectorsInTheirRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	var parts, withOpts int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE c.reloptions @> '{fillfactor=70,toast_tuple_target=8160}')
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'memories'::regclass`).Scan(&parts, &withOpts))
	require.Greater(t, parts, 1, "the template is partitioned")
	require.Equal(t, parts, withOpts, "every partition carries the options")

	st := semantic.NewStore(semantic.Options{}, nil)
	org := "inline-" + testenv.RandomID(4)
	require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		for i := range 20 {
			nm := newMem(org, "u1", fmt.Sprintf("%d %s", i, strings.Repeat("colour grade for the spring campaign, shot list and lut notes; ", 8)))
			if _, _, err := st.Create(ctx, tx, nm); err != nil {
				return err
			}
		}
		return nil
	}))
	var rowSize, toast int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT (SELECT min(pg_column_size(m.*)) FROM memories m WHERE org_id = $1),
		(SELECT sum(pg_relation_size(c.reltoastrelid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		 WHERE i.inhparent = 'memories'::regclass)`, org).Scan(&rowSize, &toast))
	require.Greater(t, rowSize, int64(2100), "the rows are past the default toast threshold")
	require.Zero(t, toast, "no vector (nor text) went to a TOAST table")
}
