package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

const (
	benchJobs   = 10000
	benchSteps  = 50
	benchEvents = 20
	benchCPs    = 5
)

// loadResumeData fills a fresh database with benchJobs jobs of org "bench", each with
// benchSteps steps (49 completed with results, 1 in flight), benchCPs checkpoint versions
// and benchEvents events — the data set of docs/benchmarks.md, "Durable jobs".
func loadResumeData(b *testing.B, dsn string) {
	b.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(b, err)
	defer c.Close(ctx)
	for _, q := range []string{
		`INSERT INTO jobs (org_id, job_id, goal, status, owner, metadata, checkpoint_version, progress_at, created_at, updated_at)
		 SELECT 'bench', 'job-' || g, 'render scene ' || g, 'running', 'agent-1', '{"project":"p"}', ` + fmt.Sprint(benchCPs) + `, now(), now(), now()
		 FROM generate_series(1, ` + fmt.Sprint(benchJobs) + `) g`,
		`INSERT INTO job_checkpoints (org_id, job_id, version, goal, current_step, done, pending, next_action, state, working_state, event_seq, agent_id, created_at)
		 SELECT 'bench', 'job-' || g, v, 'render scene ' || g, 'step-' || (v * 10), '["step-01","step-02","step-03"]', '["step-50"]',
		        'run step-50 with the approved LUT', jsonb_build_object('v', v, 'notes', repeat('n', 300)), '{"draft": 3, "cursor": 1200}',
		        ` + fmt.Sprint(benchEvents) + `, 'agent-1', now() - (` + fmt.Sprint(benchCPs) + ` - v) * interval '1 minute'
		 FROM generate_series(1, ` + fmt.Sprint(benchJobs) + `) g, generate_series(1, ` + fmt.Sprint(benchCPs) + `) v`,
		`INSERT INTO job_steps (org_id, job_id, step_id, status, owner, fencing_token, attempts, lease_seconds, lease_expires_at,
		        input, result, started_at, heartbeat_at, finished_at)
		 SELECT 'bench', 'job-' || g, 'step-' || lpad(s::text, 2, '0'),
		        CASE WHEN s < ` + fmt.Sprint(benchSteps) + ` THEN 'completed' ELSE 'running' END, 'agent-1', 1, 1, 600,
		        now() + interval '10 minutes', jsonb_build_object('tool', 'render', 'model', 'm1', 'params', jsonb_build_object('scene', g, 'step', s)),
		        CASE WHEN s < ` + fmt.Sprint(benchSteps) + ` THEN jsonb_build_object('uri', 's3://bucket/' || g || '/' || s || '.mp4', 'frames', 1200) END,
		        now() - interval '1 hour' + s * interval '1 minute', now(),
		        CASE WHEN s < ` + fmt.Sprint(benchSteps) + ` THEN now() - interval '1 hour' + s * interval '1 minute' END
		 FROM generate_series(1, ` + fmt.Sprint(benchJobs) + `) g, generate_series(1, ` + fmt.Sprint(benchSteps) + `) s`,
		`INSERT INTO episodic_jobs (org_id, job_id, last_seq) SELECT 'bench', 'job-' || g, ` + fmt.Sprint(benchEvents) + `
		 FROM generate_series(1, ` + fmt.Sprint(benchJobs) + `) g`,
		`INSERT INTO episodic_events (org_id, job_id, seq, op, params, result, fingerprint, agent_id)
		 SELECT 'bench', 'job-' || g, e, 'video.render', jsonb_build_object('scene', g, 'step', e),
		        jsonb_build_object('uri', 's3://bucket/' || g || '/' || e), sha256(('job-' || g || '/' || e)::bytea), 'agent-1'
		 FROM generate_series(1, ` + fmt.Sprint(benchJobs) + `) g, generate_series(1, ` + fmt.Sprint(benchEvents) + `) e`,
		`ANALYZE`,
	} {
		_, err := c.Exec(ctx, q)
		require.NoError(b, err, q)
	}
}

// latencies times each call and reports p50/p99 (µs).
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func (l latencies) report(b *testing.B) (p50, p99 time.Duration) {
	p50, p99 = l.pct(0.50), l.pct(0.99)
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
	return p50, p99
}

// BenchmarkResume measures GET /v1/jobs/{job}/resume on 10,000 jobs × 50 steps (plus 5
// checkpoint versions and 20 events each), against the floor of a bare pgx SELECT of the
// job row, in the same run:
//
//	go test -run '^$' -bench BenchmarkResume -benchtime 3000x ./internal/httpapi/
func BenchmarkResume(b *testing.B) {
	ctx := context.Background()
	dsn := testenv.DatabaseURL(b)
	began := time.Now()
	loadResumeData(b, dsn)
	b.Logf("loaded %d jobs × %d steps in %s", benchJobs, benchSteps, time.Since(began).Round(time.Millisecond))

	owner, err := pgxpool.New(ctx, dsn) // the floor: no role switch, no transaction
	require.NoError(b, err)
	defer owner.Close()
	pool, err := pg.NewPool(ctx, dsn, pg.PoolOptions{MaxConns: 8})
	require.NoError(b, err)
	defer pool.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return fmt.Sprint("job-", 1+rng.IntN(benchJobs)) }

	var floor time.Duration
	b.Run("floor-select-job-row", func(b *testing.B) {
		var l latencies
		for b.Loop() {
			t0 := time.Now()
			var goal string
			require.NoError(b, owner.QueryRow(ctx, `SELECT goal FROM jobs WHERE org_id = $1 AND job_id = $2`, "bench", pick()).Scan(&goal))
			l = append(l, time.Since(t0))
		}
		floor, _ = l.report(b)
	})

	store := jobs.NewStore(15*time.Minute, time.Now)
	b.Run("store-resume", func(b *testing.B) {
		var l latencies
		for b.Loop() {
			t0 := time.Now()
			require.NoError(b, pg.InOrgTx(ctx, pool, "bench", func(tx pgx.Tx) error {
				r, err := store.Resume(ctx, tx, "bench", pick())
				if err == nil && len(r.CompletedSteps) != benchSteps-1 {
					err = fmt.Errorf("%d completed steps", len(r.CompletedSteps))
				}
				return err
			}))
			l = append(l, time.Since(t0))
		}
		p50, _ := l.report(b)
		b.ReportMetric(float64(p50)/float64(floor), "p50-x-floor")
	})

	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(b, err)
	rdb, prefix := testenv.Redis(b)
	cfg.RedisPrefix = prefix
	keys := auth.NewStore(pool, "", cfg.AdminOrg)
	var secret string
	require.NoError(b, pg.InOrgTx(ctx, pool, "bench", func(tx pgx.Tx) error {
		_, secret, err = keys.Create(ctx, tx, "bench", strata.RoleAgent, "bench", "bench")
		return err
	}))
	srv := httptest.NewServer(newServer(b, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), pool, rdb))
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Run("http-resume", func(b *testing.B) {
		var l latencies
		var size int64
		for b.Loop() {
			req, _ := http.NewRequest("GET", srv.URL+"/v1/jobs/"+pick()+"/resume", nil)
			req.Header.Set("Authorization", "Bearer "+secret)
			t0 := time.Now()
			resp, err := hc.Do(req)
			require.NoError(b, err)
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			l = append(l, time.Since(t0))
			require.Equal(b, 200, resp.StatusCode)
			size = n
		}
		p50, _ := l.report(b)
		b.ReportMetric(float64(p50)/float64(floor), "p50-x-floor")
		b.ReportMetric(float64(size), "body-bytes")
	})
}
