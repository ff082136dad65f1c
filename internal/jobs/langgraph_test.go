package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/jobs"
)

// Concurrent first puts to a new thread: one creates the job, the others wait on its row and
// follow; every root checkpoint gets its own job checkpoint version, none twice.
func TestLangGraphConcurrentPutsOnANewThread(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	var wg sync.WaitGroup
	results := make([]jobs.LangGraphPutResult, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id := fmt.Sprintf("c%02d", i)
			errs[i] = e.tx("acme", func(tx pgx.Tx) error {
				var err error
				results[i], err = e.store.LangGraphPut(context.Background(), tx, "acme", "thread", jobs.LangGraphPut{
					CheckpointID: id, Checkpoint: json.RawMessage(`{"v":4,"id":"` + id + `","channel_versions":{"a":1}}`),
					Blobs: []jobs.LangGraphBlob{{Channel: "a", Version: "1", Type: "json", Data: []byte(`1`)}}})
				return err
			})
		}(i)
	}
	wg.Wait()
	created, versions := 0, map[int64]bool{}
	for i := 0; i < n; i++ {
		require.NoError(t, errs[i])
		require.True(t, results[i].Created)
		if results[i].JobCreated {
			created++
		}
		require.False(t, versions[results[i].JobVersion], "version %d twice", results[i].JobVersion)
		versions[results[i].JobVersion] = true
	}
	require.Equal(t, 1, created)
	var j jobs.Job
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		var err error
		j, err = e.store.GetJob(context.Background(), tx, "acme", "thread")
		return err
	}))
	require.EqualValues(t, n, j.CheckpointVersion)
	require.JSONEq(t, `{"langgraph": true}`, string(j.Metadata))

	// Another org sees none of it.
	require.NoError(t, e.tx("globex", func(tx pgx.Tx) error {
		l, err := e.store.LangGraphList(context.Background(), tx, "globex", jobs.LangGraphListFilter{Limit: 100})
		require.Empty(t, l)
		return err
	}))
}

// Concurrent first putWrites to a new thread (durability "async" may write before the put):
// one creates the job, the others find it (once more, when it was created after their
// statement's snapshot) and store their writes.
func TestLangGraphConcurrentPutWritesOnANewThread(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 8
	var wg sync.WaitGroup
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = e.tx("acme", func(tx pgx.Tx) error {
				stored, c, err := e.store.LangGraphPutWrites(context.Background(), tx, "acme", "w-thread", jobs.LangGraphWrites{
					CheckpointID: "c1", TaskID: fmt.Sprintf("t%d", i),
					Writes: []jobs.LangGraphWrite{{Idx: 0, Channel: "a", Type: "json", Data: []byte(`1`)}}})
				if err == nil && stored != 1 {
					err = fmt.Errorf("stored %d", stored)
				}
				created[i] = c
				return err
			})
		}(i)
	}
	wg.Wait()
	n1 := 0
	for i := range n {
		require.NoError(t, errs[i])
		if created[i] {
			n1++
		}
	}
	require.Equal(t, 1, n1)
	var j jobs.Job
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		var err error
		j, err = e.store.GetJob(context.Background(), tx, "acme", "w-thread")
		return err
	}))
	require.Equal(t, jobs.StatusRunning, j.Status)
	require.JSONEq(t, `{"langgraph": true}`, string(j.Metadata))
}

// Reading a checkpoint looks up each of its channel values by the blobs' primary key, so the
// read costs the same on a long thread as on a new one (issue 42 item 2): before, the
// planner joined the channel versions to every blob of the table (a sequential scan that
// grew with the table, ~10 ms per getTuple at the benchmark's thread lengths).
func TestLangGraphGetLooksUpBlobsByKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const steps = 400
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		for i := 1; i <= steps; i++ {
			id := fmt.Sprintf("c%05d", i)
			v := fmt.Sprint(i)
			if _, err := e.store.LangGraphPut(ctx, tx, "acme", "long", jobs.LangGraphPut{CheckpointID: id,
				Checkpoint: json.RawMessage(`{"v":4,"id":"` + id + `","channel_versions":{"messages":"` + v + `","counter":"` + v + `"}}`),
				Blobs: []jobs.LangGraphBlob{{Channel: "messages", Version: v, Type: "json", Data: []byte(`["lorem ipsum dolor sit amet"]`)},
					{Channel: "counter", Version: v, Type: "json", Data: []byte(v)}}}); err != nil {
				return err
			}
		}
		return nil
	}))
	_, err := e.pool.Exec(ctx, `ANALYZE langgraph_blobs, langgraph_checkpoints, langgraph_writes`)
	require.NoError(t, err)
	var got jobs.LangGraphTuple
	var seq, idx, fetched int64
	require.NoError(t, e.tx("acme", func(tx pgx.Tx) error {
		// The read's own scans of langgraph_blobs: pg_stat_xact_user_tables after the read
		// minus before it. The view also holds counts of this backend's earlier transactions
		// that Postgres 15 has not flushed yet (it flushes at most once a second), so only the
		// difference is the read's.
		const scans = `SELECT coalesce(sum(seq_scan), 0)::bigint, coalesce(sum(idx_scan), 0)::bigint,
			coalesce(sum(idx_tup_fetch), 0)::bigint FROM pg_stat_xact_user_tables WHERE relname = 'langgraph_blobs'`
		var seq0, idx0, fetched0 int64 // a row even when nothing is pending (sum)
		if err := tx.QueryRow(ctx, scans).Scan(&seq0, &idx0, &fetched0); err != nil {
			return err
		}
		var err error
		if got, err = e.store.LangGraphGet(ctx, tx, "acme", "long", "", ""); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, scans).Scan(&seq, &idx, &fetched); err != nil {
			return err
		}
		seq, idx, fetched = seq-seq0, idx-idx0, fetched-fetched0
		return nil
	}))
	require.Equal(t, fmt.Sprintf("c%05d", steps), got.CheckpointID)
	require.Len(t, got.ChannelValues, 2)
	require.Zero(t, seq, "sequential scans of langgraph_blobs")
	require.EqualValues(t, 2, idx, "index lookups of langgraph_blobs: one per channel")
	require.EqualValues(t, 2, fetched, "blob rows read (the thread has %d)", 2*steps)
}
