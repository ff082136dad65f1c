package httpapi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestIdempotencyReplayUnderRestriction: a recorded answer is the subject's data served
// again, so it is not replayed while the subject is restricted (GDPR Art. 18) — 403, as the
// read or write itself would get — and replays again once the restriction is lifted. A
// read sent as POST (context, search, batch-get) is not recorded at all: an erasure could
// not find such a copy (it names neither the subject nor the record it came from), and a
// replay of it after the erasure served the erased state.
func TestIdempotencyReplayUnderRestriction(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	const marker = "DIAGNOSIS-CAROL-7f3"
	idem := func(k string) []string { return []string{"Idempotency-Key", k} }

	// Recorded before the restriction: a state write (answers the whole state), a job put
	// (answers the goal) and a memory write naming the user.
	state := map[string]any{"state": map[string]any{"diagnosis": marker}, "user_id": "carol"}
	need(t, s.Do("PUT", "/v1/sessions/s-carol/state", agent, state, idem("st-1")...), 200, 201)
	job := map[string]any{"goal": "edit " + marker, "user_id": "carol"}
	need(t, s.Do("PUT", "/v1/jobs/j-carol", agent, job, idem("job-1")...), 201)
	mem := map[string]any{"text": "carol: " + marker, "user_id": "carol"}
	need(t, s.Do("POST", "/v1/memories", agent, mem, idem("mem-1")...), 201)
	ctxBody := map[string]any{"query": "diagnosis", "session_id": "s-carol"}
	r := need(t, s.Do("POST", "/v1/context", agent, ctxBody, idem("ctx-1")...), 200)
	require.Contains(t, string(r.Body), marker)
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))
	// The same read again is answered afresh, never replayed.
	r = need(t, s.Do("POST", "/v1/context", agent, ctxBody, idem("ctx-1")...), 200)
	require.Empty(t, r.Header.Get("Idempotent-Replayed"), "a read is not recorded")
	var recorded int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_keys WHERE org_id = 'acme' AND key = 'ctx-1'`).Scan(&recorded))
	require.Zero(t, recorded, "no record of a read")

	need(t, s.Do("POST", "/v1/gdpr/restrictions/carol", comp, map[string]any{"reason": "contested"}), 201)
	replays := []struct {
		method, path string
		body         any
		key          string
	}{
		{"PUT", "/v1/sessions/s-carol/state", state, "st-1"},
		{"PUT", "/v1/jobs/j-carol", job, "job-1"},
		{"POST", "/v1/memories", mem, "mem-1"},
	}
	for _, c := range replays {
		r := s.Do(c.method, c.path, agent, c.body, idem(c.key)...)
		require.Equal(t, 403, r.Status, "%s %s replayed while restricted: %s", c.method, c.path, r.Body)
		require.NotContains(t, string(r.Body), marker)
		require.Contains(t, string(r.Body), "Art. 18")
	}
	r = need(t, s.Do("POST", "/v1/context", agent, ctxBody, idem("ctx-1")...), 200)
	require.NotContains(t, string(r.Body), marker, "context while restricted")

	need(t, s.Do("DELETE", "/v1/gdpr/restrictions/carol", comp, nil), 200)
	for _, c := range replays {
		r := s.Do(c.method, c.path, agent, c.body, idem(c.key)...)
		require.Less(t, r.Status, 300, "%s %s after the restriction was lifted: %s", c.method, c.path, r.Body)
		require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"), "%s %s", c.method, c.path)
	}

	// Erased, nothing of the subject comes back through a key sent before.
	e := need(t, s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": "carol"}), 202)
	waitErasure(t, s, comp, e.Map(t)["id"].(string))
	r = s.Do("POST", "/v1/context", agent, ctxBody, idem("ctx-1")...)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), marker, "context after the erasure")
}
