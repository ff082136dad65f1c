package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkStepClaimComplete measures the step write path: one transaction claiming a new
// step (Start) and one completing it (Complete), as a worker does for every step, against the
// floor of two bare transactions that update the job row, in the same run (docs/benchmarks.md,
// "Step attempts"):
//
//	go test -run '^$' -bench BenchmarkStepClaimComplete -benchtime 2000x ./internal/jobs/
func BenchmarkStepClaimComplete(b *testing.B) {
	ctx := context.Background()
	pool, _ := testenv.Pool(b)
	store := jobs.NewStore(15*time.Minute, time.Now)
	const org = "bench"
	require.NoError(b, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
		for i := range 20 {
			if _, _, err := store.PutJob(ctx, tx, org, fmt.Sprint("job-", i), jobs.JobSpec{Goal: "render"}, nil); err != nil {
				return err
			}
		}
		return nil
	}))
	in := jobs.StartInput{Owner: "worker-1", LeaseSeconds: 60,
		Input: jobs.StepInput{Tool: "ffmpeg", Model: "m1", Params: json.RawMessage(`{"crop":[0,0,1920,1080],"scene":12}`)}}
	result := json.RawMessage(`{"uri":"s3://bucket/out.mp4","frames":1200}`)

	var floor time.Duration
	b.Run("floor-two-tx-update-job", func(b *testing.B) {
		n := 0
		t0 := time.Now()
		for b.Loop() {
			job := fmt.Sprint("job-", n%20)
			n++
			for range 2 {
				require.NoError(b, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `UPDATE jobs SET progress_at = now() WHERE org_id = $1 AND job_id = $2`, org, job)
					return err
				}))
			}
		}
		floor = time.Since(t0) / time.Duration(n)
	})
	b.Run("claim-complete", func(b *testing.B) {
		n := 0
		t0 := time.Now()
		for b.Loop() {
			job, step := fmt.Sprint("job-", n%20), fmt.Sprint("step-", n)
			n++
			var c jobs.Claim
			require.NoError(b, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
				var err error
				c, err = store.Start(ctx, tx, org, job, step, in)
				return err
			}))
			require.NoError(b, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
				_, err := store.Complete(ctx, tx, org, job, step, c.FencingToken, result)
				return err
			}))
		}
		per := time.Since(t0) / time.Duration(n)
		b.ReportMetric(float64(per.Microseconds()), "µs/pair")
		if floor > 0 {
			b.ReportMetric(float64(per)/float64(floor), "x-floor")
		}
	})
}
