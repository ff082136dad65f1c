package loadtest_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/loadtest"
	"github.com/strata-mem/strata/internal/testenv"
)

// A short run against a real server: it sets up its own org and data with the admin key,
// measures the maximum, runs at a fraction of it, and every endpoint of the mix answers
// without an error.
func TestLoadtestMixedWorkloadAgainstServer(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	var progress bytes.Buffer
	rep, err := loadtest.Run(context.Background(), loadtest.Config{
		URL: s.URL, AdminKey: s.AdminKey, Concurrency: 4, Agents: 2, Memories: 12,
		RateFraction: 0.5, ProbeDuration: 1500 * time.Millisecond, Duration: 1500 * time.Millisecond,
		Settle: 200 * time.Millisecond, Progress: &progress,
	})
	require.NoError(t, err)
	require.Len(t, rep.Phases, 2)
	require.Greater(t, rep.MaxThroughput, 0.0)
	require.Equal(t, "probe (closed loop)", rep.Phases[0].Name)
	main := rep.Main()
	require.Equal(t, "fixed rate", main.Name)
	require.Equal(t, max(1, int(rep.MaxThroughput*0.5)), main.Rate)
	for _, p := range rep.Phases {
		require.Zero(t, p.Errors, "%s: %+v", p.Name, p.ByStatus)
		require.Greater(t, p.Requests, uint64(0))
		require.LessOrEqual(t, p.P50Ms, p.P99Ms)
		// The timeline adds up to the phase (one window: the phase is shorter than one).
		require.Len(t, p.Timeline, 1, p.Name)
		require.Equal(t, p.Requests, p.Timeline[0].Requests)
		require.Equal(t, p.P99Ms, p.Timeline[0].P99Ms)
	}
	require.Contains(t, progress.String(), "settling for 200ms")
	// Every endpoint of the mix ran in the probe (the bigger phase), context included: the
	// load test's request body is the endpoint's real contract.
	probe := rep.Phases[0]
	for _, n := range rep.Notes {
		require.NotContains(t, n, "/v1/context", "the context endpoint was skipped")
	}
	for ep := range loadtest.DefaultMix {
		e, ok := probe.Endpoints[ep]
		require.True(t, ok, "endpoint %s never ran: %+v", ep, probe.Endpoints)
		require.Greater(t, e.Requests, uint64(0), ep)
		require.Greater(t, e.P99Ms, 0.0, ep)
	}
	require.Contains(t, progress.String(), "req/s")

	// The writes landed: more events than the setup wrote, completed steps beyond setup's.
	owner := testenv.OwnerConn(t, s.DBURL)
	var events, completed int
	require.NoError(t, owner.QueryRow(context.Background(), `SELECT count(*) FROM episodic_events WHERE org_id = $1`, rep.Org).Scan(&events))
	require.Greater(t, events, 2*4*20, "setup wrote 20 events per job")
	require.NoError(t, owner.QueryRow(context.Background(),
		`SELECT count(*) FROM job_steps WHERE org_id = $1 AND status = 'completed' AND step_id LIKE 'lt-%'`, rep.Org).Scan(&completed))
	require.Greater(t, completed, 0)
}

func TestLoadtestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := loadtest.Run(context.Background(), loadtest.Config{URL: "http://127.0.0.1:1"})
	require.ErrorContains(t, err, "admin key")
	_, err = loadtest.Run(context.Background(), loadtest.Config{URL: "http://127.0.0.1:1", AdminKey: "k", Mix: map[string]int{"nope": 1}})
	require.ErrorContains(t, err, `unknown endpoint "nope"`)
	_, err = loadtest.Run(context.Background(), loadtest.Config{URL: "http://127.0.0.1:1", AdminKey: "k", Rate: -1})
	require.ErrorContains(t, err, "rate")
	_, err = loadtest.Run(context.Background(), loadtest.Config{URL: "http://127.0.0.1:1", AdminKey: "k", Settle: -time.Second})
	require.ErrorContains(t, err, "--settle")
}

// The optional handoff endpoint cycles each of its jobs through create and acknowledge,
// open loop, without a conflict, and every one of its requests emits exactly one event.
func TestLoadtestHandoffCycleEmitsOneEventPerRequest(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	rep, err := loadtest.Run(context.Background(), loadtest.Config{
		URL: s.URL, AdminKey: s.AdminKey, Concurrency: 8, Agents: 1, Memories: 1,
		Mix: map[string]int{loadtest.EpHandoff: 3, loadtest.EpStateGet: 1}, Rate: 150, Duration: 1500 * time.Millisecond,
	})
	require.NoError(t, err)
	main := rep.Main()
	for ep, e := range main.Endpoints {
		require.Zero(t, e.Errors, "%s: %v %q", ep, e.ByStatus, e.ErrorTexts)
	}
	created, acked := main.Endpoints[loadtest.EpHandoff], main.Endpoints[loadtest.EpHandoffAck]
	require.NotNil(t, created)
	require.NotNil(t, acked)
	require.Greater(t, acked.Requests, uint64(0))
	emitting := created.Requests + acked.Requests
	if ev := main.Endpoints[loadtest.EpEventAppend]; ev != nil { // all 8 jobs in flight at once: appended instead
		require.Less(t, ev.Requests, emitting)
	}
	var events uint64
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*) FROM outbox_events WHERE org_id = $1 AND type IN ('handoff.pending', 'handoff.acknowledged')`, rep.Org).Scan(&events))
	require.Equal(t, emitting, events)
}
