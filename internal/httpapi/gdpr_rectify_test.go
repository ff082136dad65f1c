package httpapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestGDPRRectification: compliance corrects a memory and a key-value entry on the subject's
// behalf; each is a new version whose history says it was a rectification (memory metadata
// and provenance, key-value op "rectify"), and the audit log records action rectification
// on the entity with the subject's pseudonym. Another subject's record is refused.
func TestGDPRRectification(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	a := writeSubject(t, s, agent, "r")
	b := writeSubject(t, s, agent, "q")

	// memory: the current version is memoryIDs[1]
	r := s.Do("POST", "/v1/gdpr/rectifications", comp, map[string]any{"user_id": a.user, "reason": "subject says it is wrong",
		"memory": map[string]any{"id": a.memoryIDs[1], "text": "prefers cycling to walking"}})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	out := r.Map(t)
	require.Equal(t, "memory", out["type"])
	require.EqualValues(t, 2, out["previous_version"])
	mem := out["memory"].(map[string]any)
	require.EqualValues(t, 3, mem["version"])
	require.Equal(t, "prefers cycling to walking", mem["text"])
	h := s.Do("GET", "/v1/memories/"+a.memoryIDs[0]+"/history", agent, nil)
	require.Equal(t, 200, h.Status)
	var hist struct{ Items []map[string]any }
	h.JSON(t, &hist)
	require.Len(t, hist.Items, 3)
	last := hist.Items[2]
	require.Equal(t, "gdpr:rectification", last["provenance"].(map[string]any)["agent_id"])
	rect := last["metadata"].(map[string]any)["rectification"].(map[string]any)
	require.Equal(t, "subject says it is wrong", rect["reason"])
	require.NotEmpty(t, rect["key_id"])
	require.NotNil(t, hist.Items[1]["superseded_by"], "the corrected version stays in the history, superseded")
	// search now finds the corrected text
	r = s.Do("POST", "/v1/memories/search", agent, map[string]any{"query": "cycling", "user_id": a.user})
	require.Contains(t, string(r.Body), "prefers cycling to walking")

	// key-value: user level, and session level
	r = s.Do("POST", "/v1/gdpr/rectifications", comp, map[string]any{"user_id": a.user,
		"kv": map[string]any{"namespace": "prefs", "key": "colour", "value": "green"}})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, "kv", r.Map(t)["type"])
	r = s.Do("GET", "/v1/kv/prefs/colour/history?user_id="+a.user, agent, nil)
	var kvh struct{ Items []map[string]any }
	r.JSON(t, &kvh)
	require.Equal(t, "rectify", kvh.Items[0]["op"])
	require.Equal(t, "green", kvh.Items[0]["value"])
	require.Equal(t, "put", kvh.Items[1]["op"])
	r = s.Do("GET", "/v1/kv/prefs/colour?user_id="+a.user, agent, nil)
	require.Equal(t, "green", r.Map(t)["value"], "the cache serves the corrected value")
	r = s.Do("POST", "/v1/gdpr/rectifications", comp, map[string]any{"user_id": a.user,
		"kv": map[string]any{"namespace": "prefs", "key": "tone", "session_id": a.session, "value": "warm"}})
	require.Equal(t, 200, r.Status, "%s", r.Body)

	// someone else's records are refused; so is a missing entry, and a body naming both kinds
	r = s.Do("POST", "/v1/gdpr/rectifications", comp, map[string]any{"user_id": a.user,
		"memory": map[string]any{"id": b.memoryIDs[1], "text": "x"}})
	require.Equal(t, 422, r.Status, "%s", r.Body)
	r = s.Do("POST", "/v1/gdpr/rectifications", comp, map[string]any{"user_id": a.user,
		"kv": map[string]any{"namespace": "prefs", "key": "tone", "session_id": b.session, "value": "x"}})
	require.Equal(t, 422, r.Status, "%s", r.Body)
	r = s.Do("POST", "/v1/gdpr/rectifications", comp, map[string]any{"user_id": a.user,
		"kv": map[string]any{"namespace": "prefs", "key": "nope", "value": "x"}})
	require.Equal(t, 422, r.Status, "%s", r.Body)
	r = s.Do("POST", "/v1/gdpr/rectifications", comp, map[string]any{"user_id": a.user})
	require.Equal(t, 422, r.Status, "%s", r.Body)

	// audit: one rectification record per correction, on the entity, subject pseudonymised
	r = s.Do("GET", "/v1/audit?action=rectification&user_id="+a.user, comp, nil)
	require.Equal(t, 200, r.Status)
	var recs struct{ Items []map[string]any }
	r.JSON(t, &recs)
	require.Len(t, recs.Items, 3)
	require.Equal(t, "memory", recs.Items[0]["entity_type"])
	require.Equal(t, a.memoryIDs[0], recs.Items[0]["entity_id"], "the memory's root id")
	require.Equal(t, "kv", recs.Items[1]["entity_type"])
	require.NotContains(t, string(r.Body), a.user)
	require.NotContains(t, string(r.Body), "subject says it is wrong", "reasons stay out of the audit log")
}
