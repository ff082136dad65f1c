package partition_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/partition"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

const orgs = 8

// seed fills the three tables of an unpartitioned database as the owner.
func seed(t *testing.T, owner *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO episodic_events (org_id, job_id, seq, op, params, fingerprint)
		 SELECT 'org' || (g % ` + fmt.Sprint(orgs) + `), 'job' || (g % 3), g, 'edit', jsonb_build_object('n', g), sha256(g::text::bytea)
		 FROM generate_series(1, 6000) g`,
		`INSERT INTO memories (org_id, id, root_id, kind, text, text_hash, trust, embedding, embedder, model, dims, valid_from, updated_at)
		 SELECT 'org' || (g % ` + fmt.Sprint(orgs) + `), md5('seed' || g)::uuid, md5('seed' || g)::uuid, 'fact', 'seed memory ' || g,
		        sha256(('seed ' || g)::bytea), 'agent_inferred', '[1,2,3]'::vector, 'test', 'test', 3, now(), now()
		 FROM generate_series(1, 3000) g`,
		`INSERT INTO audit_log (org_id, actor_key_id, actor_role, action, entity_type, entity_id)
		 SELECT 'org' || (g % ` + fmt.Sprint(orgs) + `), 'k', 'agent', 'seed', 'memory', g::text FROM generate_series(1, 4000) g`,
	} {
		_, err := owner.Exec(ctx, q)
		require.NoError(t, err)
	}
}

type writers struct {
	events, memories, audits, bumps, chained atomic.Int64
	errs                                     chan error
	stop                                     chan struct{}
	wg                                       sync.WaitGroup
}

// write runs request-role writers (strata_app, row-level security binding) against every
// table until stopped: event appends, memory inserts, access-count updates of seeded
// memories, audit inserts and the chainer's one-time fill of seeded audit rows.
func write(ctx context.Context, pool *pgxpool.Pool) *writers {
	w := &writers{errs: make(chan error, 100), stop: make(chan struct{})}
	loop := func(id int, step func(org string, i int) error) {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				org := fmt.Sprintf("org%d", (i+id)%orgs)
				if err := step(org, i); err != nil {
					w.errs <- err
					return
				}
			}
		}()
	}
	loop(0, func(org string, i int) error {
		return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO episodic_events (org_id, job_id, seq, op, params, fingerprint)
				VALUES ($1, 'live', $2, 'edit', '{}', sha256($3::bytea))`, org, i+1, fmt.Sprint(i+1))
			if err == nil {
				w.events.Add(1)
			}
			return err
		})
	})
	loop(1, func(org string, i int) error {
		return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO memories (org_id, id, root_id, kind, text, text_hash, trust, embedding, embedder, model, dims, valid_from, updated_at)
				SELECT $1, u, u, 'fact', 'live ' || $2, sha256(('live ' || $2)::bytea), 'agent_inferred', '[1,2,3]'::vector, 'test', 'test', 3, now(), now()
				FROM (SELECT gen_random_uuid() AS u) x`, org, fmt.Sprint(i))
			if err == nil {
				w.memories.Add(1)
			}
			return err
		})
	})
	loop(2, func(org string, i int) error {
		return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE memories SET access_count = access_count + 1
				WHERE org_id = $1 AND id = (SELECT id FROM memories WHERE org_id = $1 AND text LIKE 'seed %' ORDER BY id OFFSET $2 LIMIT 1)`, org, i%300)
			if err == nil {
				w.bumps.Add(tag.RowsAffected())
			}
			return err
		})
	})
	loop(3, func(org string, i int) error {
		return pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO audit_log (org_id, actor_key_id, actor_role, action, entity_type) VALUES ($1, 'k', 'agent', 'live', 'job')`, org)
			if err != nil {
				return err
			}
			w.audits.Add(1)
			tag, err := tx.Exec(ctx, `UPDATE audit_log SET hash = '\x01', prev_hash = '\x00', seq = id
				WHERE org_id = $1 AND id = (SELECT id FROM audit_log WHERE org_id = $1 AND hash IS NULL AND action = 'seed' ORDER BY id LIMIT 1)`, org)
			if err == nil {
				w.chained.Add(tag.RowsAffected())
			}
			return err
		})
	})
	return w
}

func (w *writers) halt(t *testing.T) {
	close(w.stop)
	w.wg.Wait()
	select {
	case err := <-w.errs:
		require.NoError(t, err, "a writer failed during the move")
	default:
	}
}

// fingerprint hashes the rows the writers never change (seeded events; seeded memories
// without their access counts; seeded audit rows without their chain columns).
func fingerprint(t *testing.T, owner *pgx.Conn) [3]string {
	t.Helper()
	var out [3]string
	ctx := context.Background()
	for i, q := range []string{
		`SELECT md5(string_agg(e::text, '|' ORDER BY org_id, job_id, seq)) FROM episodic_events e WHERE job_id <> 'live'`,
		`SELECT md5(string_agg(org_id || id || text || text_hash::text || embedding::text || valid_from::text, '|' ORDER BY org_id, id)) FROM memories WHERE text LIKE 'seed %'`,
		`SELECT md5(string_agg(org_id || id || at::text || action || entity_id, '|' ORDER BY org_id, id)) FROM audit_log WHERE action = 'seed'`,
	} {
		require.NoError(t, owner.QueryRow(ctx, q).Scan(&out[i]))
	}
	return out
}

func counts(t *testing.T, owner *pgx.Conn) (ev, mem, aud, accessSum, chained int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, owner.QueryRow(ctx, `SELECT (SELECT count(*) FROM episodic_events), (SELECT count(*) FROM memories),
		(SELECT count(*) FROM audit_log), (SELECT coalesce(sum(access_count), 0) FROM memories),
		(SELECT count(*) FROM audit_log WHERE hash IS NOT NULL)`).Scan(&ev, &mem, &aud, &accessSum, &chained))
	return
}

// TestMoveOnlineKilledAndRerun moves an unpartitioned database with rows (migrated with
// partitions=0) while request-role writers insert and update every table; the first
// mover is cancelled in the middle of its copy of memories, a second run finishes it.
// Afterwards every row is present exactly once, the seeded rows are unchanged, every
// write made during the move is there, the identity keeps counting, row-level security
// binds on the new tables and the request role cannot reach a partition.
func TestMoveOnlineKilledAndRerun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.DatabaseURLPartitions(t, 0)
	owner := testenv.OwnerConn(t, dsn)
	seed(t, owner)
	var kind string
	require.NoError(t, owner.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'memories'::regclass`).Scan(&kind))
	require.Equal(t, "r", kind, "partitions=0 leaves the tables as they are")
	before := fingerprint(t, owner)
	ev0, mem0, aud0, acc0, ch0 := counts(t, owner)
	var maxAudit int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT max(id) FROM audit_log`).Scan(&maxAudit))

	pool, err := pg.NewPool(ctx, dsn, pg.PoolOptions{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	w := write(ctx, pool)
	defer func() {
		select {
		case <-w.stop:
		default:
			close(w.stop)
			w.wg.Wait()
		}
	}()

	// A second mover is refused while one holds the lock.
	lock := testenv.OwnerConn(t, dsn)
	_, err = lock.Exec(ctx, `SELECT pg_advisory_lock(6013557165336383568)`) // partition.lockKey
	require.NoError(t, err)
	_, err = partition.Move(ctx, dsn, partition.Options{Partitions: 4})
	require.ErrorIs(t, err, partition.ErrBusy)
	_, err = lock.Exec(ctx, `SELECT pg_advisory_unlock(6013557165336383568)`)
	require.NoError(t, err)

	// Run 1: killed while copying memories (the cancel lands during the next batch).
	kctx, kill := context.WithCancel(ctx)
	defer kill()
	_, err = partition.Move(kctx, dsn, partition.Options{Partitions: 4, Batch: 300, OnBatch: func(table string, copied int64) {
		time.Sleep(2 * time.Millisecond) // let the writers interleave with the copy
		if table == "memories" && copied >= 1200 {
			go func() { time.Sleep(time.Millisecond); kill() }()
		}
	}})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled) || kctx.Err() != nil, "%v", err)
	var state string
	var copied int64
	var lastKey []string
	require.NoError(t, owner.QueryRow(ctx, `SELECT state, rows_copied, last_key FROM strata_partition_moves WHERE table_name = 'memories'`).Scan(&state, &copied, &lastKey))
	require.Equal(t, "copying", state)
	require.GreaterOrEqual(t, copied, int64(1200))
	require.Len(t, lastKey, 2, "(org_id, id)")
	require.NoError(t, owner.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'episodic_events'::regclass`).Scan(&kind))
	require.Equal(t, "p", kind, "the first table was swapped before the kill")
	require.NoError(t, owner.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'memories'::regclass`).Scan(&kind))
	require.Equal(t, "r", kind)

	time.Sleep(100 * time.Millisecond) // writes land while nothing copies: the mirror alone carries them
	// Run 2: resumes after the recorded key and finishes.
	rep, err := partition.Move(ctx, dsn, partition.Options{Partitions: 4, Batch: 300, OnBatch: func(string, int64) { time.Sleep(2 * time.Millisecond) }})
	require.NoError(t, err)
	require.Len(t, rep, 3)
	require.True(t, rep[0].Already)
	require.False(t, rep[1].Already)
	// Every seeded memory was read by a committed batch once; live ones came through the
	// mirror, and those written before the copy passed their key were read by it too.
	require.GreaterOrEqual(t, rep[1].Copied, mem0)
	require.LessOrEqual(t, rep[1].Copied, mem0+w.memories.Load())
	time.Sleep(100 * time.Millisecond) // and writes go on into the partitioned tables
	w.halt(t)
	t.Logf("written during the move: %d events, %d memories, %d audit rows, %d access updates, %d chain fills; memories copied by batches: %d",
		w.events.Load(), w.memories.Load(), w.audits.Load(), w.bumps.Load(), w.chained.Load(), rep[1].Copied)

	for _, tbl := range partition.Tables {
		var parts int
		require.NoError(t, owner.QueryRow(ctx, `SELECT relkind::text, (SELECT count(*) FROM pg_inherits WHERE inhparent = c.oid)
			FROM pg_class c WHERE oid = $1::regclass`, tbl).Scan(&kind, &parts))
		require.Equal(t, "p", kind, tbl)
		require.Equal(t, 4, parts, tbl)
		var leftovers int
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ($1 || '_partitioned', $1 || '_unpartitioned_old')`, tbl).Scan(&leftovers))
		require.Zero(t, leftovers, tbl)
		var mirrors int
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'strata_partition_mirror%'`).Scan(&mirrors))
		require.Zero(t, mirrors)
	}
	require.Equal(t, before, fingerprint(t, owner), "seeded rows unchanged")
	ev, mem, aud, acc, ch := counts(t, owner)
	require.Equal(t, ev0+w.events.Load(), ev, "events: seeded + written, each once")
	require.Equal(t, mem0+w.memories.Load(), mem, "memories: seeded + written, each once")
	require.Equal(t, aud0+w.audits.Load(), aud, "audit rows: seeded + written, each once")
	require.Equal(t, acc0+w.bumps.Load(), acc, "every access-count update made during the move")
	require.Equal(t, ch0+w.chained.Load(), ch, "every chain fill made during the move")
	require.Greater(t, w.events.Load()+w.memories.Load()+w.audits.Load(), int64(30), "the writers wrote during the move")
	var dup int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM (SELECT org_id, job_id, seq FROM episodic_events GROUP BY 1, 2, 3 HAVING count(*) > 1) d`).Scan(&dup))
	require.Zero(t, dup)

	// The identity continues; triggers, grants and row-level security came along.
	require.NoError(t, pg.InOrgTx(ctx, pool, "org1", func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO audit_log (org_id, actor_key_id, actor_role, action, entity_type) VALUES ('org1', 'k', 'agent', 'after', 'job') RETURNING id`).Scan(&id); err != nil {
			return err
		}
		require.Greater(t, id, maxAudit)
		var others int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM memories WHERE org_id <> 'org1'`).Scan(&others); err != nil {
			return err
		}
		require.Zero(t, others, "row-level security binds on the new memories")
		return nil
	}))
	err = pg.InOrgTx(ctx, pool, "org1", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM audit_log WHERE org_id = 'org1'`)
		return err
	})
	require.ErrorContains(t, err, "append-only")
	err = pg.InOrgTx(ctx, pool, "org1", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT 1 FROM memories_p0 LIMIT 1`)
		return err
	})
	require.ErrorContains(t, err, "permission denied")
	err = pg.InOrgTx(ctx, pool, "org1", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE episodic_events SET op = 'x' WHERE org_id = 'org1'`)
		return err
	})
	require.ErrorContains(t, err, "append-only")
	var setting string
	require.NoError(t, owner.QueryRow(ctx, `SELECT value FROM strata_settings WHERE name = 'partitions'`).Scan(&setting))
	require.Equal(t, "4", setting)

	// A rerun has nothing to do.
	rep, err = partition.Move(ctx, dsn, partition.Options{Partitions: 4})
	require.NoError(t, err)
	for _, r := range rep {
		require.True(t, r.Already, r.Table)
	}
}
