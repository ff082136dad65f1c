package httpapi_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// jobIDs lists the org's job ids through GET /v1/jobs as key, with extra headers.
func jobIDs(t *testing.T, s *apptest.Server, key string, hdr ...string) map[string]bool {
	t.Helper()
	r := s.Do("GET", "/v1/jobs?limit=1000", key, nil, hdr...)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var page struct {
		Items []struct {
			JobID string `json:"job_id"`
		} `json:"items"`
	}
	r.JSON(t, &page)
	ids := map[string]bool{}
	for _, it := range page.Items {
		ids[it.JobID] = true
	}
	return ids
}

// A real primary and streaming standby: list reads go to the standby, a caller's reads
// after its own write and reads with X-Strata-Consistency: strong go to the primary, a
// standby whose replay is paused past the lag bound is skipped, and a standby stopped
// mid-run costs no error.
func TestReadReplicaRouting(t *testing.T) {
	t.Parallel()
	pair := testenv.StartPostgresPair(t)
	const maxLag = 3 * time.Second
	s := apptest.Start(t, apptest.Env("STRATA_DATABASE_URL", pair.Primary.URL),
		apptest.Env("STRATA_DATABASE_REPLICA_URL", pair.Standby.URL),
		apptest.Env("STRATA_REPLICA_MAX_LAG", maxLag.String()), apptest.Env("STRATA_DB_MAX_CONNS", "8"))
	ctx := context.Background()
	writer, reader := s.NewKey("acme", "agent"), s.NewKey("acme", "agent")

	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j1", writer, map[string]any{"goal": "first"}).Status)
	// The standby catches up, and the reader (which wrote nothing) is served by it.
	require.Eventually(t, func() bool { return jobIDs(t, s, reader)["j1"] }, 30*time.Second, 20*time.Millisecond)
	n, err := pair.Standby.QueryInt(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'strata-replica'`)
	require.NoError(t, err)
	require.Positive(t, n, "the server holds connections to the standby")

	// Replay paused: the standby stays at j1. A write of j2 is seen at once by its writer
	// (its reads go to the primary) and by a strong read, but not by the reader, whose
	// list the standby answers while it is within the lag bound.
	require.NoError(t, pair.Standby.Exec(ctx, `SELECT pg_wal_replay_pause()`))
	paused := time.Now()
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j2", writer, map[string]any{"goal": "second"}).Status)
	require.True(t, jobIDs(t, s, writer)["j2"], "read-your-writes: the writer's read went to the primary")
	require.True(t, jobIDs(t, s, reader, "X-Strata-Consistency", "strong")["j2"], "a strong read goes to the primary")
	// Within the bound the reader's lists come from the paused standby (one such answer
	// is enough: on a loaded machine the router may skip the standby early).
	stale, inWindow := false, 0
	for !stale && time.Since(paused) < maxLag-500*time.Millisecond {
		ids := jobIDs(t, s, reader)
		if time.Since(paused) < maxLag-500*time.Millisecond {
			inWindow++
			require.True(t, ids["j1"])
			stale = !ids["j2"]
		}
	}
	if inWindow > 0 {
		require.True(t, stale, "the reader's list came from the (paused) standby")
	}
	// Past the lag bound the paused standby is skipped: the reader sees j2 (from the
	// primary: the standby cannot have it while its replay is paused).
	require.Eventually(t, func() bool { return jobIDs(t, s, reader)["j2"] }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, pair.Standby.Exec(ctx, `SELECT pg_wal_replay_resume()`))

	// The semantic search and similar-jobs reads run on the standby too (their audit rows
	// commit on the primary).
	require.Equal(t, 201, s.Do("POST", "/v1/memories", writer, map[string]any{"text": "the client prefers warm colours"}).Status)
	require.Eventually(t, func() bool {
		r := s.Do("POST", "/v1/memories/search", reader, map[string]any{"query": "warm colours"})
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var res struct {
			Items []any `json:"items"`
		}
		r.JSON(t, &res)
		return len(res.Items) == 1
	}, 30*time.Second, 20*time.Millisecond)
	r := s.Do("POST", "/v1/jobs/similar", reader, map[string]any{"query": "first"})
	require.Equal(t, 200, r.Status, "%s", r.Body)

	// The standby dies mid-run: every read still answers 200 (retried on the primary, then
	// routed there until it is back).
	var wg sync.WaitGroup
	var reads, bad atomic.Int64
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := s.Do("GET", "/v1/jobs?limit=10", reader, nil)
				reads.Add(1)
				if r.Status != 200 {
					bad.Add(1)
					t.Errorf("GET /v1/jobs with the standby going down: %d %s", r.Status, r.Body)
				}
			}
		}()
	}
	waitReads := func(n int64) {
		target := reads.Load() + n
		require.Eventually(t, func() bool { return reads.Load() >= target }, 60*time.Second, 5*time.Millisecond)
	}
	waitReads(40)
	pair.Standby.Stop()
	waitReads(80)
	close(stop)
	wg.Wait()
	require.Zero(t, bad.Load())
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/j3", writer, map[string]any{"goal": "third"}).Status)
	require.True(t, jobIDs(t, s, reader)["j3"], "with the standby gone, reads are the primary's")
	t.Logf("reads during the standby's loss: %d", reads.Load())
}
