package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// countRows counts rows of the org's database with the owner connection (bypasses RLS).
func rowsOf(t *testing.T, s *apptest.Server, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// TestQuarantineLeavesRestrictedSubjectAlone (issue 57, red-team finding 5): a quarantine
// over the key that wrote a restricted subject's memories neither lists their text, nor
// purges them, nor releases them; the answers say how many were kept.
func TestQuarantineLeavesRestrictedSubjectAlone(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin, comp := s.NewKey("acme", "admin"), s.NewKey("acme", "compliance")
	agent, agentID := keyWithID(t, s, admin, "agent")
	for _, m := range []map[string]any{
		{"text": "Ivy's blood type is AB negative", "user_id": "ivy"},
		{"text": "Ivy lives at 4 Elm Street", "user_id": "ivy"},
		{"text": "Bob prefers tea", "user_id": "bob"},
	} {
		need(t, s.Do("POST", "/v1/memories", agent, m), 201)
	}
	need(t, s.Do("POST", "/v1/gdpr/restrictions/ivy", comp, map[string]any{"reason": "disputed"}), 200, 201)

	q := need(t, s.Do("POST", "/v1/admin/quarantines", admin, map[string]any{"key_id": agentID, "since": "2026-01-01T00:00:00Z"}), 201).Map(t)
	id := q["id"].(string)
	require.EqualValues(t, 3, q["held"], "counts may still count them")
	require.EqualValues(t, 2, q["restricted"])

	r := need(t, s.Do("GET", "/v1/admin/quarantines/"+id+"/memories", admin, nil), 200)
	require.NotContains(t, string(r.Body), "Ivy", "a restricted subject's memories are not served")
	require.NotContains(t, string(r.Body), `"ivy"`)
	items := r.Map(t)["items"].([]any)
	require.Len(t, items, 1)
	require.Equal(t, "Bob prefers tea", items[0].(map[string]any)["text"])

	p := need(t, s.Do("POST", "/v1/admin/quarantines/"+id+"/purge", admin, nil), 200).Map(t)
	require.Len(t, p["deleted_versions"], 1)
	require.EqualValues(t, 2, p["kept_restricted"])
	require.NotContains(t, string(need(t, s.Do("GET", "/v1/admin/quarantines/"+id, admin, nil), 200).Body), "Ivy")
	require.Equal(t, 2, rowsOf(t, s, `SELECT count(*) FROM memories WHERE user_id = 'ivy'`), "purge kept them")
	require.Equal(t, 0, rowsOf(t, s, `SELECT count(*) FROM memories WHERE user_id = 'bob'`))

	rel := need(t, s.Do("POST", "/v1/admin/quarantines/"+id+"/release", admin, nil), 200).Map(t)
	require.EqualValues(t, 2, rel["restricted"], "the answer says how many stay held")
	require.Equal(t, 2, rowsOf(t, s, `SELECT count(*) FROM memories WHERE user_id = 'ivy' AND quarantined`),
		"release leaves them as they are (held)")
}

// TestEvictionSkipsRestrictedSubject (issue 57, red-team finding 6): neither the eviction
// preview nor a run touches a restricted subject's memories or sessions, under any rule.
func TestEvictionSkipsRestrictedSubject(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin, agent, comp := s.NewKey("acme", "admin"), s.NewKey("acme", "agent"), s.NewKey("acme", "compliance")
	ivy := map[string]bool{}
	for _, u := range []string{"ivy", "bob"} {
		for _, text := range []string{"likes green", "owns a cat", "runs on sundays"} {
			r := need(t, s.Do("POST", "/v1/memories", agent, map[string]any{"text": u + " " + text, "user_id": u}), 201)
			if u == "ivy" {
				ivy[r.Map(t)["id"].(string)] = true
			}
		}
		need(t, s.Do("POST", "/v1/sessions/s-"+u+"/messages", agent, map[string]any{"role": "user", "content": "hi", "user_id": u}), 201)
		need(t, s.Do("PUT", "/v1/kv/prefs/colour", agent, map[string]any{"value": "blue", "user_id": u}), 201)
		need(t, s.Do("PUT", "/v1/kv/prefs/colour", agent, map[string]any{"value": "red", "user_id": u}), 200)
	}
	need(t, s.Do("POST", "/v1/gdpr/restrictions/ivy", comp, map[string]any{"reason": "disputed"}), 200, 201)
	need(t, s.Do("PUT", "/v1/admin/policies", admin, map[string]any{
		"memories":  map[string]any{"default": map[string]any{"max_items_per_scope": 1}},
		"working":   map[string]any{"session_ttl": "1h"},
		"key_value": map[string]any{"history_retention": "1h"}}, "If-Match", `"0"`), 201)
	_, err := testenv.OwnerConn(t, s.DBURL).Exec(context.Background(),
		`UPDATE working_sessions SET updated_at = now() - interval '2 days', expires_at = now() - interval '2 days'`)
	require.NoError(t, err)
	_, err = testenv.OwnerConn(t, s.DBURL).Exec(context.Background(), `UPDATE kv_versions SET written_at = now() - interval '2 days'`)
	require.NoError(t, err)

	check := func(path string) evictionResp {
		r := need(t, s.Do("POST", path, admin, nil), 200)
		var rep evictionResp
		r.JSON(t, &rep)
		for _, it := range rep.Items {
			for _, x := range it.SampleIDs {
				require.False(t, ivy[x], "%s lists a restricted memory (%s)", path, it.Reason)
				require.NotEqual(t, "s-ivy", x, "%s lists a restricted session", path)
			}
		}
		return rep
	}
	prev := check("/v1/admin/eviction/preview")
	require.Equal(t, 4, prev.Total, "bob's two surplus memories, his session and his old key-value version")
	run := check("/v1/admin/eviction/run")
	require.True(t, run.Applied)
	require.Equal(t, 4, run.Total)
	require.Equal(t, 2, rowsOf(t, s, `SELECT count(*) FROM kv_versions WHERE user_id = 'ivy'`))
	require.Equal(t, 1, rowsOf(t, s, `SELECT count(*) FROM kv_versions WHERE user_id = 'bob'`))
	require.Equal(t, 3, rowsOf(t, s, `SELECT count(*) FROM memories WHERE user_id = 'ivy'`))
	require.Equal(t, 1, rowsOf(t, s, `SELECT count(*) FROM memories WHERE user_id = 'bob'`))
	require.Equal(t, 1, rowsOf(t, s, `SELECT count(*) FROM working_sessions WHERE session_id = 's-ivy' AND deleted_at IS NULL`))
	require.Equal(t, 1, rowsOf(t, s, `SELECT count(*) FROM working_turns WHERE session_id = 's-ivy'`))

	// Age rules too (max_inactivity 365d by default).
	_, err = testenv.OwnerConn(t, s.DBURL).Exec(context.Background(),
		`UPDATE memories SET valid_from = now() - interval '400 days', updated_at = now() - interval '400 days'`)
	require.NoError(t, err)
	run = check("/v1/admin/eviction/run")
	require.Equal(t, 1, run.Total, "bob's last memory")
	require.Equal(t, 3, rowsOf(t, s, `SELECT count(*) FROM memories WHERE user_id = 'ivy'`))
	a := need(t, s.Do("GET", "/v1/audit?action=evict", admin, nil), 200)
	for id := range ivy {
		require.False(t, strings.Contains(string(a.Body), id))
	}
}

// TestCompactionSkipsRestrictedSubject (issue 57): episodic compaction appends no summary
// event to a restricted subject's finished job (its log is not changed), and compacts it
// once the restriction is lifted; another subject's job is compacted at once.
func TestCompactionSkipsRestrictedSubject(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	admin, agent, comp := s.NewKey("acme", "admin"), s.NewKey("acme", "agent"), s.NewKey("acme", "compliance")
	for _, u := range []string{"ivy", "bob"} {
		job := "job-" + u
		need(t, s.Do("PUT", "/v1/jobs/"+job, agent, map[string]any{"goal": "grade the teaser", "user_id": u}), 201)
		var evs []map[string]any
		for i := range 4 {
			evs = append(evs, map[string]any{"op": "grade", "params": map[string]any{"lut": i}})
		}
		evs = append(evs, map[string]any{"op": "crop", "params": map[string]any{"w": 1080}})
		need(t, s.Do("POST", "/v1/jobs/"+job+"/events", agent, evs), 201)
		need(t, s.Do("POST", "/v1/jobs/"+job+"/complete", agent, map[string]any{"outcome": "delivered"}), 200)
	}
	need(t, s.Do("POST", "/v1/gdpr/restrictions/ivy", comp, map[string]any{"reason": "disputed"}), 200, 201)
	need(t, s.Do("PUT", "/v1/admin/policies", admin, map[string]any{
		"consolidation": map[string]any{"compact_after": "1h", "compact_min_run": 2}}, "If-Match", `"0"`), 201)
	_, err := testenv.OwnerConn(t, s.DBURL).Exec(context.Background(), `UPDATE jobs SET finished_at = now() - interval '2 days'`)
	require.NoError(t, err)

	compactions := func(job string) int {
		return rowsOf(t, s, `SELECT count(*) FROM episodic_events WHERE job_id = $1 AND op = 'strata.compaction'`, job)
	}
	var rep struct {
		Compaction struct {
			Jobs int `json:"jobs"`
		} `json:"compaction"`
	}
	need(t, s.Do("POST", "/v1/admin/consolidation/run", admin, map[string]any{"tasks": []string{"compaction"}}), 200).JSON(t, &rep)
	require.Equal(t, 1, rep.Compaction.Jobs, "bob's job only")
	require.Equal(t, 1, compactions("job-bob"))
	require.Equal(t, 0, compactions("job-ivy"), "a restricted subject's log is not changed")

	need(t, s.Do("DELETE", "/v1/gdpr/restrictions/ivy", comp, nil), 200, 204)
	need(t, s.Do("POST", "/v1/admin/consolidation/run", admin, map[string]any{"tasks": []string{"compaction"}}), 200).JSON(t, &rep)
	require.Equal(t, 1, rep.Compaction.Jobs, "ivy's job once lifted")
	require.Equal(t, 1, compactions("job-ivy"))
}
