package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

type policyResp struct {
	OrgID   string `json:"org_id"`
	Version int64  `json:"version"`
	Policy  struct {
		Memories struct {
			Default map[string]any            `json:"default"`
			Kinds   map[string]map[string]any `json:"kinds"`
		} `json:"memories"`
		Working map[string]any `json:"working"`
	} `json:"policy"`
}

type evictionResp struct {
	Applied bool `json:"applied"`
	Total   int  `json:"total"`
	Items   []struct {
		Tier      string   `json:"tier"`
		Reason    string   `json:"reason"`
		Kind      string   `json:"kind"`
		Policy    string   `json:"policy"`
		Count     int      `json:"count"`
		SampleIDs []string `json:"sample_ids"`
	} `json:"items"`
}

func TestLifecyclePoliciesAPI(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin, agent := s.NewKey("pol", "admin"), s.NewKey("pol", "agent")

	r := s.Do("GET", "/v1/admin/policies", admin, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"0"`, r.Header.Get("ETag"))
	var p policyResp
	r.JSON(t, &p)
	require.Equal(t, int64(0), p.Version)
	require.Equal(t, "365d", p.Policy.Memories.Default["max_inactivity"])
	require.Equal(t, "90d", p.Policy.Memories.Default["verify_age"])
	require.Equal(t, 403, s.Do("GET", "/v1/admin/policies", agent, nil).Status)

	body := map[string]any{"memories": map[string]any{"kinds": map[string]any{"fact": map[string]any{"verify_age": "1h"}}},
		"working": map[string]any{"session_ttl": "7d"}}
	r = s.Do("PUT", "/v1/admin/policies", admin, body, "If-Match", `"0"`)
	require.Equal(t, 201, r.Status, string(r.Body))
	r.JSON(t, &p)
	require.Equal(t, int64(1), p.Version)
	require.Equal(t, "1h", p.Policy.Memories.Kinds["fact"]["verify_age"])
	require.Equal(t, "365d", p.Policy.Memories.Kinds["fact"]["max_inactivity"], "a kind inherits the default")
	require.Equal(t, "7d", p.Policy.Working["session_ttl"])
	require.Equal(t, 409, s.Do("PUT", "/v1/admin/policies", admin, body, "If-Match", `"0"`).Status)

	r = s.Do("PUT", "/v1/admin/policies", admin, map[string]any{"memories": map[string]any{"default": map[string]any{"max_age": "soon"}}})
	require.Equal(t, 422, r.Status)
	require.Contains(t, string(r.Body), "body.memories.default.max_age")
	r = s.Do("PUT", "/v1/admin/policies", admin, map[string]any{"consolidation": map[string]any{"merge_threshold": 2}})
	require.Equal(t, 422, r.Status)
	require.Contains(t, string(r.Body), "merge_threshold")
	r = s.Do("GET", "/v1/admin/policies", admin, nil)
	require.Equal(t, `"1"`, r.Header.Get("ETag"), "refused writes stored nothing")

	// Search's staleness flag follows the org's verify_age for facts.
	other := s.NewKey("pol2", "agent")
	for _, k := range []string{agent, other} {
		require.Equal(t, 201, s.Do("POST", "/v1/memories", k, map[string]any{"text": "the studio is in Lyon"}).Status)
	}
	_, err := testenv.OwnerConn(t, s.DBURL).Exec(context.Background(), `UPDATE memories SET valid_from = now() - interval '2 hours'`)
	require.NoError(t, err)
	stale := func(key string) bool {
		r := s.Do("POST", "/v1/memories/search", key, map[string]any{"query": "studio Lyon"})
		require.Equal(t, 200, r.Status, string(r.Body))
		var sr searchResp
		r.JSON(t, &sr)
		require.Len(t, sr.Items, 1)
		return sr.Items[0].Stale
	}
	require.True(t, stale(agent), "pol: verify_age 1h")
	require.False(t, stale(other), "pol2: the default 90d")
	// So does the per-turn context's (its policy read rides in its first round trip).
	contextStale := func(key string) bool {
		r := s.Do("POST", "/v1/context", key, map[string]any{"query": "studio Lyon", "similar_jobs": 0})
		require.Equal(t, 200, r.Status, string(r.Body))
		require.Contains(t, string(r.Body), "the studio is in Lyon")
		return strings.Contains(string(r.Body), "stale: verify before relying on it")
	}
	require.True(t, contextStale(agent), "pol: verify_age 1h")
	require.False(t, contextStale(other), "pol2: the default 90d")
}

func TestLifecycleEvictionPreviewRunAPI(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin, agent := s.NewKey("ev", "admin"), s.NewKey("ev", "agent")
	var ids []string
	for _, text := range []string{"old secret fact one", "old secret fact two", "old secret fact three"} {
		r := s.Do("POST", "/v1/memories", agent, map[string]any{"text": text, "user_id": "u1"})
		require.Equal(t, 201, r.Status)
		ids = append(ids, r.Map(t)["id"].(string))
	}
	r := s.Do("POST", "/v1/memories", agent, map[string]any{"text": "old pinned fact", "pinned": true})
	require.Equal(t, 201, r.Status)
	pinned := r.Map(t)["id"].(string)
	_, err := testenv.OwnerConn(t, s.DBURL).Exec(context.Background(),
		`UPDATE memories SET valid_from = now() - interval '400 days', updated_at = now() - interval '400 days'`)
	require.NoError(t, err)

	r = s.Do("POST", "/v1/admin/eviction/preview", admin, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var prev evictionResp
	r.JSON(t, &prev)
	require.False(t, prev.Applied)
	require.Equal(t, 3, prev.Total)
	require.Len(t, prev.Items, 1)
	require.Equal(t, "max_inactivity", prev.Items[0].Reason)
	require.Equal(t, "fact", prev.Items[0].Kind)
	require.ElementsMatch(t, ids, prev.Items[0].SampleIDs)
	require.Equal(t, 200, s.Do("GET", "/v1/memories/"+ids[0], agent, nil).Status, "preview changes nothing")
	require.Equal(t, 403, s.Do("POST", "/v1/admin/eviction/run", agent, nil).Status)

	r = s.Do("POST", "/v1/admin/eviction/run", admin, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var run evictionResp
	r.JSON(t, &run)
	require.True(t, run.Applied)
	prev.Applied = true
	require.Equal(t, prev, run)
	for _, id := range ids {
		require.Equal(t, 404, s.Do("GET", "/v1/memories/"+id, agent, nil).Status)
	}
	require.Equal(t, 200, s.Do("GET", "/v1/memories/"+pinned, agent, nil).Status)
	r = s.Do("POST", "/v1/admin/eviction/run", admin, nil)
	r.JSON(t, &run)
	require.Equal(t, 0, run.Total)

	r = s.Do("GET", "/v1/audit?action=evict", admin, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), ids[0])
	require.NotContains(t, string(r.Body), "secret", "no memory content in the audit trail")

	m := s.Do("GET", "/metrics", "", nil)
	require.True(t, strings.Contains(string(m.Body), `strata_evicted_total{reason="max_inactivity",tier="memories"}`))
}

func TestLifecycleConsolidationRunAndSimilarJobs(t *testing.T) {
	t.Parallel()
	// The outbox poll is long: only this test's explicit run consolidates.
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	admin, agent := s.NewKey("co", "admin"), s.NewKey("co", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/teaser-1", agent, map[string]any{"goal": "colour grade the teaser", "user_id": "u1"}).Status)
	r := s.Do("POST", "/v1/jobs/teaser-1/events", agent, []map[string]any{
		{"op": "color.grade", "params": map[string]any{"lut": "cold"}},
		{"op": "color.grade", "params": map[string]any{"lut": "warm", "exposure": 0.3}},
		{"op": "crop", "params": map[string]any{"w": 1080}},
	})
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, 201, s.Do("POST", "/v1/jobs/teaser-1/events/3/revert", agent, map[string]any{"reason": "wrong"}).Status)
	r = s.Do("POST", "/v1/jobs/teaser-1/complete", agent, map[string]any{"outcome": "delivered"})
	require.Equal(t, 200, r.Status, string(r.Body))

	r = s.Do("POST", "/v1/admin/consolidation/run", admin, map[string]any{"tasks": []string{"job_summaries"}})
	require.Equal(t, 200, r.Status, string(r.Body))
	var rep struct {
		JobSummaries struct {
			Written int `json:"written"`
			Items   []struct {
				JobID  string `json:"job_id"`
				Status string `json:"status"`
			} `json:"items"`
		} `json:"job_summaries"`
	}
	r.JSON(t, &rep)
	require.Equal(t, 1, rep.JobSummaries.Written, string(r.Body))
	require.Equal(t, 422, s.Do("POST", "/v1/admin/consolidation/run", admin, map[string]any{"tasks": []string{"nap"}}).Status)

	r = s.Do("POST", "/v1/jobs/similar", agent, map[string]any{"query": "colour grade a teaser", "user_id": "u1"})
	require.Equal(t, 200, r.Status, string(r.Body))
	var sim struct {
		Items []struct {
			JobID      string         `json:"job_id"`
			Outcome    any            `json:"outcome"`
			Parameters map[string]any `json:"parameters"`
		} `json:"items"`
	}
	r.JSON(t, &sim)
	require.Len(t, sim.Items, 1)
	require.Equal(t, "teaser-1", sim.Items[0].JobID)
	require.Equal(t, "delivered", sim.Items[0].Outcome)
	require.Equal(t, map[string]any{"color.grade": map[string]any{"lut": "warm", "exposure": 0.3}}, sim.Items[0].Parameters,
		"the reverted crop is not a settled parameter")

	r = s.Do("POST", "/v1/admin/consolidation/run", admin, nil)
	require.Equal(t, 200, r.Status)
	r.JSON(t, &rep)
	require.Equal(t, 0, rep.JobSummaries.Written, "idempotent")
}

func TestLifecycleBackgroundWorkers(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_OUTBOX_POLL", "1s"))
	agent := s.NewKey("bg", "agent")
	require.Equal(t, 201, s.Do("PUT", "/v1/jobs/bg-1", agent, map[string]any{"goal": "transcode the master"}).Status)
	require.Equal(t, 201, s.Do("POST", "/v1/jobs/bg-1/events", agent, map[string]any{"op": "transcode", "params": map[string]any{"codec": "h265"}}).Status)
	require.Equal(t, 200, s.Do("POST", "/v1/jobs/bg-1/complete", agent, map[string]any{"outcome": "ok"}).Status)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.Do("POST", "/v1/jobs/similar", agent, map[string]any{"query": "transcode master"})
		require.Equal(t, 200, r.Status)
		if strings.Contains(string(r.Body), `"job_id":"bg-1"`) {
			var sim struct {
				Items []struct {
					Parameters map[string]any `json:"parameters"`
				} `json:"items"`
			}
			require.NoError(t, json.Unmarshal(r.Body, &sim))
			require.Equal(t, map[string]any{"transcode": map[string]any{"codec": "h265"}}, sim.Items[0].Parameters)
			break
		}
		require.True(t, time.Now().Before(deadline), "the background worker never summarised the job")
		time.Sleep(200 * time.Millisecond) // kept: polls the public API for the background worker (end to end through app.Run)
	}
	// River reports the job completed just after its transaction committed.
	for {
		m := string(s.Do("GET", "/metrics", "", nil).Body)
		if strings.Contains(m, `strata_worker_job_duration_seconds_count{kind="consolidate_job",outcome="completed"}`) {
			require.True(t, strings.Contains(m, `strata_consolidated_total{task="job_summary"}`))
			require.True(t, strings.Contains(m, `strata_worker_job_queue_wait_seconds_count{kind="consolidate_job"}`))
			break
		}
		require.True(t, time.Now().Before(deadline), "no job metrics for consolidate_job")
		time.Sleep(100 * time.Millisecond) // kept: polls /metrics for the worker's job metrics (end to end through app.Run)
	}
}
