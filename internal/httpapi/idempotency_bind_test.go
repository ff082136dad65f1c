package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestIdempotencyReplayChecksRoleFirst is issue 57's attack: an agent key that replays an
// admin's Idempotency-Key and body on an admin route got the admin's 201 (and a different
// body got 422 "already used"). The role check runs before any replay: both are the 403
// any agent gets there, and nothing is written.
func TestIdempotencyReplayChecksRoleFirst(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin := s.NewKey("acme", "admin")
	agent := s.NewKey("acme", "agent")
	_, rogueID := keyWithID(t, s, admin, "agent")
	since := time.Now().UTC().Add(-time.Hour)
	body := map[string]any{"key_id": rogueID, "since": since, "reason": "key leaked"}

	r := s.Do("POST", "/v1/admin/quarantines", admin, body, "Idempotency-Key", "q-admin-1")
	require.Equal(t, 201, r.Status, string(r.Body))
	qid := r.Map(t)["id"].(string)

	r = s.Do("POST", "/v1/admin/quarantines", agent, body, "Idempotency-Key", "q-admin-1")
	requireProblem(t, r, 403, "")
	require.NotContains(t, string(r.Body), qid, "the admin's response is not replayed")
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))

	other := map[string]any{"key_id": rogueID, "since": since, "reason": "probing"}
	r = s.Do("POST", "/v1/admin/quarantines", agent, other, "Idempotency-Key", "q-admin-1")
	requireProblem(t, r, 403, "")
	require.NotContains(t, string(r.Body), "already used", "no hint that the key was used")

	// An agent may not mint a key under an admin's used Idempotency-Key either.
	r = s.Do("POST", "/v1/admin/keys", agent, map[string]any{"role": "admin"}, "Idempotency-Key", "q-admin-1")
	requireProblem(t, r, 403, "")

	require.Equal(t, 1, countRows(t, s, "memory_quarantines"))
	// The admin's own retry still replays.
	r = s.Do("POST", "/v1/admin/quarantines", admin, body, "Idempotency-Key", "q-admin-1")
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, qid, r.Map(t)["id"])
}

// TestIdempotencyRecordsBoundToKey: an Idempotency-Key record belongs to the API key that
// made it. Another key of the same org (any role) reusing the key string, with the same
// request or another, gets one and the same 422 that says nothing of the first request:
// not its response, not whether its body matched; nothing is written. On every path that
// claims keys: the plain claim (kv), the claim in front of the first statement (memories)
// and group commit (event appends).
func TestIdempotencyRecordsBoundToKey(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin := s.NewKey("acme", "admin")
	alice := s.NewKey("acme", "agent")
	mallory := s.NewKey("acme", "agent")

	type write struct {
		name, method, path string
		body, other        map[string]any
		secret             string // what the first response holds that must not leak
		count              string // the table the write adds rows to
	}
	writes := []write{
		{name: "kv", method: "PUT", path: "/v1/kv/notes/plan",
			body:   map[string]any{"value": map[string]any{"plan": "alice-secret-plan"}, "user_id": "u1"},
			other:  map[string]any{"value": map[string]any{"plan": "mallory-overwrite"}, "user_id": "u1"},
			secret: "alice-secret-plan", count: "kv_versions"},
		{name: "memory", method: "POST", path: "/v1/memories",
			body:   map[string]any{"text": "alice-secret-memory about the launch", "user_id": "u1"},
			other:  map[string]any{"text": "mallory planted memory", "user_id": "u1"},
			secret: "alice-secret-memory", count: "memories"},
		{name: "events", method: "POST", path: "/v1/jobs/job-1/events",
			body:   map[string]any{"op": "note", "params": map[string]any{"msg": "alice-secret-event"}},
			other:  map[string]any{"op": "note", "params": map[string]any{"msg": "mallory event"}},
			secret: "alice-secret-event", count: "episodic_events"},
	}
	for _, wr := range writes {
		key := "bind-" + wr.name
		r := s.Do(wr.method, wr.path, alice, wr.body, "Idempotency-Key", key)
		require.Less(t, r.Status, 300, "%s: %s", wr.name, r.Body)
		require.Contains(t, string(r.Body), wr.secret)
		first := string(r.Body)
		before := countRows(t, s, wr.count)

		var details []string
		for _, caller := range []string{mallory, admin} {
			for _, b := range []map[string]any{wr.body, wr.other} {
				r := s.Do(wr.method, wr.path, caller, b, "Idempotency-Key", key)
				requireProblem(t, r, 422, "header.Idempotency-Key")
				require.Empty(t, r.Header.Get("Idempotent-Replayed"), wr.name)
				require.NotContains(t, string(r.Body), wr.secret, "%s: the first response does not leak", wr.name)
				m := r.Map(t)
				details = append(details, m["detail"].(string)+" "+fmt.Sprint(m["errors"]))
			}
		}
		for _, d := range details[1:] {
			require.Equal(t, details[0], d, "%s: same body or not, any role: one answer", wr.name)
		}
		require.NotContains(t, details[0], "different", "%s: says nothing of the first request's body", wr.name)
		require.Equal(t, before, countRows(t, s, wr.count), "%s: nothing written", wr.name)

		// The key that made the record still replays it.
		r = s.Do(wr.method, wr.path, alice, wr.body, "Idempotency-Key", key)
		require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"), "%s: %s", wr.name, r.Body)
		require.JSONEq(t, first, string(r.Body))
		require.False(t, strings.Contains(string(r.Body), "mallory"))
	}
}
