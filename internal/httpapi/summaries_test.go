package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/llmtest"
)

// summaryAnswer answers the fake model's rolling-summary calls with a summary naming the
// seqs it was shown, and extraction calls with the media answer.
func summaryAnswer(p llmtest.Prompt) string {
	if js, _ := p.ResponseFormat["json_schema"].(map[string]any); js != nil && js["name"] == "rolling_summary" {
		var prev struct {
			Previous string           `json:"previous_summary"`
			Events   []map[string]any `json:"events"`
		}
		for _, m := range p.Messages {
			if m.Role == "user" {
				_ = json.Unmarshal([]byte(m.Content), &prev)
				break
			}
		}
		n := len(p.Doc.Turns) + len(prev.Events)
		b, _ := json.Marshal(map[string]string{"summary": strings.TrimSpace(prev.Previous + fmt.Sprintf(
			"\nFolded %d items; the user exports in 4K.", n))})
		return string(b)
	}
	return mediaAnswer(p)
}

func waitStatus(t *testing.T, s *apptest.Server, key, path string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var last map[string]any
	require.Eventually(t, func() bool {
		r := s.Do("GET", path, key, nil)
		if r.Status != 200 {
			return false
		}
		last = r.Map(t)
		return ok(last)
	}, 60*time.Second, 50*time.Millisecond, "%s: %v", path, last)
	return last
}

// TestRollingSummariesThroughTheAPI: a session's spilled turns and a 2,000-event job's older
// log are summarised by the background job into versioned summaries (GET .../summary and
// .../summary/versions); /v1/context carries them as its summary section with a token
// count and stays within budget; nothing is summarised for a restricted subject; the
// export holds the summaries and the extraction rows; erasure removes the summaries
// (receipt count); another org sees nothing.
func TestRollingSummariesThroughTheAPI(t *testing.T) {
	t.Parallel()
	llm := llmtest.New(t, summaryAnswer)
	s := apptest.Start(t, apptest.NoAutoConsolidation(), apptest.Env("STRATA_LLM_MODEL", "fake-model"),
		apptest.Env("OPENAI_BASE_URL", llm.BaseURL()), apptest.Env("STRATA_TURN_BUFFER", "5"),
		apptest.Env("STRATA_SUMMARY_EVERY", "3"), apptest.Env("STRATA_SUMMARY_POLL", "100ms"),
		apptest.Env("STRATA_SUMMARY_KEEP_EVENTS", "50"))
	key, other, comp := s.NewKey("acme", "agent"), s.NewKey("globex", "agent"), s.NewKey("acme", "compliance")

	// Ana is restricted before her turns spill: nothing of hers is summarised.
	need(t, s.Do("POST", "/v1/gdpr/restrictions/ana", comp, map[string]any{"reason": "disputed"}), 200, 201)
	say := func(session, user string, n, from int) {
		var msgs []map[string]any
		for i := from; i < from+n; i++ {
			role := []string{"user", "assistant"}[i%2]
			msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("Turn %d: export the reel in 4K, take %d.", i, i)})
		}
		need(t, s.Do("POST", "/v1/sessions/"+session+"/messages", key, map[string]any{"messages": msgs, "user_id": user, "agent_id": "editor"}), 201)
	}
	say("a1", "ana", 12, 1)
	say("s1", "sam", 12, 1)
	sum := waitStatus(t, s, key, "/v1/sessions/s1/summary", func(m map[string]any) bool { return m["to_seq"] == float64(7) })
	require.EqualValues(t, 1, sum["version"])
	require.EqualValues(t, 1, sum["from_seq"])
	require.Equal(t, "llm:fake-model", sum["summarizer"])
	require.Equal(t, "rolling-summary-v1", sum["prompt_version"])
	require.Contains(t, sum["text"], "Folded 7 items")
	require.Positive(t, sum["tokens"])

	say("s1", "sam", 4, 13)
	sum = waitStatus(t, s, key, "/v1/sessions/s1/summary", func(m map[string]any) bool { return m["version"] == float64(2) })
	require.EqualValues(t, 8, sum["added_from"])
	require.EqualValues(t, 11, sum["to_seq"])
	vs := need(t, s.Do("GET", "/v1/sessions/s1/summary/versions?limit=1", key, nil), 200).Map(t)
	require.Len(t, vs["items"], 1)
	require.EqualValues(t, 2, vs["items"].([]any)[0].(map[string]any)["version"], "newest first")
	require.Equal(t, "2", vs["next_cursor"])
	vs = need(t, s.Do("GET", "/v1/sessions/s1/summary/versions?cursor=2", key, nil), 200).Map(t)
	require.EqualValues(t, 1, vs["items"].([]any)[0].(map[string]any)["version"])
	require.Nil(t, vs["next_cursor"])
	requireProblem(t, s.Do("GET", "/v1/sessions/s1/summary/versions?cursor=x", key, nil), 422, "query.cursor")
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/s1/summary", other, nil).Status, "another org sees nothing")
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/a1/summary", key, nil).Status, "the restricted subject's turns are not summarised")

	// Deleting a session deletes its turns, and their summary with them.
	say("s2", "kim", 12, 1)
	waitStatus(t, s, key, "/v1/sessions/s2/summary", func(m map[string]any) bool { return m["to_seq"] == float64(7) })
	require.Equal(t, 204, s.Do("DELETE", "/v1/sessions/s2/state", key, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/s2/summary", key, nil).Status)

	// A 2,000-event job: events older than the newest 50 are summarised.
	need(t, s.Do("PUT", "/v1/jobs/long-1", key, map[string]any{"goal": "Cut the Silva wedding film", "user_id": "sam"}), 200, 201)
	for b := 0; b < 4; b++ {
		evs := make([]map[string]any, 500)
		for i := range evs {
			n := b*500 + i + 1
			evs[i] = map[string]any{"op": fmt.Sprintf("video.trim.clip%d", n%37), "params": map[string]any{"clip": n, "in": n % 60, "out": n%60 + 5},
				"result": map[string]any{"asset": fmt.Sprintf("clip-%d.mov", n)}, "user_id": "sam"}
		}
		need(t, s.Do("POST", "/v1/jobs/long-1/events", key, evs), 201, 200)
	}
	js := waitStatus(t, s, key, "/v1/jobs/long-1/summary", func(m map[string]any) bool { return m["to_seq"] == float64(1950) })
	require.EqualValues(t, 1, js["from_seq"])
	require.Greater(t, js["version"], float64(1), "a 1,950-event backlog is folded in batches, one version each")
	require.LessOrEqual(t, js["tokens"], float64(800))

	// The context: the summary section sits between working state and preferences, with
	// its tokens, and the whole context stays within budget.
	ctxb := map[string]any{"user_id": "sam", "session_id": "s1", "job_id": "long-1", "max_tokens": 1200}
	c := need(t, s.Do("POST", "/v1/context", key, ctxb), 200).Map(t)
	require.LessOrEqual(t, c["tokens"], float64(1200))
	secs := c["sections"].([]any)
	require.Len(t, secs, 7)
	sec := secs[2].(map[string]any)
	require.Equal(t, "summary", sec["name"])
	require.Positive(t, sec["tokens"], "%v", sec)
	require.Contains(t, sec["text"], "## Summary of what came before (Job long-1 events #1-#1950")
	require.Contains(t, sec["text"], "session s1 turns 1-11 (summary v2)")
	require.Contains(t, c["prompt"], "Folded")

	// A summary is the subject's data: refused while the subject is restricted (Art. 18).
	need(t, s.Do("POST", "/v1/gdpr/restrictions/sam", comp, map[string]any{"reason": "disputed"}), 200, 201)
	require.Equal(t, 403, s.Do("GET", "/v1/sessions/s1/summary", key, nil).Status)
	require.Equal(t, 403, s.Do("GET", "/v1/jobs/long-1/summary/versions", key, nil).Status)
	need(t, s.Do("DELETE", "/v1/gdpr/restrictions/sam", comp, nil), 200, 204)

	// Export (Art. 15): the summaries and the extraction rows.
	need(t, s.Do("PUT", "/v1/admin/policies", s.NewKey("acme", "admin"), map[string]any{"extraction": map[string]any{"enabled": true,
		"debounce": "1h", "every_turns": 0}}), 200, 201) // on demand only (POST /v1/memories/extract needs it on)
	need(t, s.Do("POST", "/v1/memories/extract", key, map[string]any{"session_id": "s1"}), 200)
	counts := exportCounts(t, s, comp, "sam")
	require.EqualValues(t, 2+js["version"].(float64), counts["summaries.summary"])
	require.EqualValues(t, 1, counts["extraction.state"])
	require.Positive(t, counts["extraction.provenance"])

	// Erasure (Art. 17): every version goes, counted in the receipt.
	er := need(t, s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": "sam"}), 202, 201).Map(t)
	done := waitErasure(t, s, comp, er["id"].(string))
	require.Equal(t, true, done["verification"].(map[string]any)["clean"], "%v", done)
	require.EqualValues(t, 2+js["version"].(float64), done["counts"].(map[string]any)["summaries"].(map[string]any)["versions"], "%v", done)
	require.Equal(t, 404, s.Do("GET", "/v1/sessions/s1/summary", key, nil).Status)
	require.Equal(t, 404, s.Do("GET", "/v1/jobs/long-1/summary", key, nil).Status)
}

func exportCounts(t *testing.T, s *apptest.Server, key, user string) map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", s.URL+"/v1/gdpr/exports?user_id="+user, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var last map[string]any
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		last = m
	}
	require.Equal(t, "summary", last["type"])
	return last["counts"].(map[string]any)
}
