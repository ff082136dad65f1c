package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

func requireProblem(t *testing.T, r *apptest.Response, status int, location string) {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Body))
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	m := r.Map(t)
	require.EqualValues(t, status, m["status"])
	require.NotEmpty(t, r.Header.Get("X-Request-Id"))
	if location != "" {
		errs, _ := m["errors"].([]any)
		var locs []string
		for _, e := range errs {
			locs = append(locs, fmt.Sprint(e.(map[string]any)["location"]))
		}
		require.Contains(t, locs, location, string(r.Body))
	}
}

func countKeys(t *testing.T, s *apptest.Server) int {
	t.Helper()
	var n int
	require.NoError(t, testenv.OwnerConn(t, s.DBURL).QueryRow(context.Background(), "SELECT count(*) FROM api_keys").Scan(&n))
	return n
}

func TestErrorStatuses(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_MAX_BODY_BYTES", "2048"), apptest.Env("STRATA_MAX_JSON_DEPTH", "8"))
	admin := s.AdminKey
	before := countKeys(t, s)

	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"agent"`), 400, "body")
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"agent","bogus":1}`), 422, "body.bogus")
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"wizard"}`), 422, "body.role")
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"agent","name":"a\u0000b"}`), 422, "body.name")
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"agent"}`, "Content-Type", "text/plain"), 415, "")
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"agent","name":"`+strings.Repeat("x", 4096)+`"}`), 413, "")
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"agent","name":`+strings.Repeat("[", 20)+strings.Repeat("]", 20)+`}`), 400, "body")
	requireProblem(t, s.Do("DELETE", "/v1/admin/keys/bad%20id", admin, nil), 422, "path.id")
	requireProblem(t, s.Do("GET", "/v1/admin/keys?limit=5000", admin, nil), 422, "query.limit")
	requireProblem(t, s.Do("GET", "/v1/nothing-here", admin, nil), 404, "")
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, `{"role":"agent"}`, "Idempotency-Key", "has space"), 400, "header.Idempotency-Key")

	require.Equal(t, before, countKeys(t, s), "a rejected request wrote nothing")
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin := s.NewKey("acme", "admin")
	body := map[string]any{"role": "agent", "name": "bot"}

	first := s.Do("POST", "/v1/admin/keys", admin, body, "Idempotency-Key", "create-bot-1")
	require.Equal(t, 201, first.Status)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	again := s.Do("POST", "/v1/admin/keys", admin, body, "Idempotency-Key", "create-bot-1")
	require.Equal(t, 201, again.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Map(t)["id"], again.Map(t)["id"])
	require.NotEqual(t, first.Map(t)["key"], again.Map(t)["key"], "the secret is never stored for replay")

	// Same key, different body → 422, nothing written.
	n := countKeys(t, s)
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "admin"}, "Idempotency-Key", "create-bot-1"), 422, "header.Idempotency-Key")
	require.Equal(t, n, countKeys(t, s))

	// Keys are per org: another org may use the same key string.
	other := s.NewKey("other", "admin")
	require.Equal(t, 201, s.Do("POST", "/v1/admin/keys", other, body, "Idempotency-Key", "create-bot-1").Status)

	// Concurrent requests with one key: exactly one executes; the others replay it (or
	// get 409 while it is in flight).
	n = countKeys(t, s)
	var wg sync.WaitGroup
	ids := make(chan any, 12)
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.Do("POST", "/v1/admin/keys", admin, body, "Idempotency-Key", "concurrent-1")
			switch r.Status {
			case 201:
				ids <- r.Map(t)["id"]
			case 409:
			default:
				t.Errorf("unexpected %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[any]bool{}
	for id := range ids {
		seen[id] = true
	}
	require.Len(t, seen, 1, "every successful answer names the same key")
	require.Equal(t, n+1, countKeys(t, s), "exactly one key was created")
}

func TestIdempotencyRecordsExpire(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin := s.NewKey("acme", "admin")
	require.Equal(t, 201, s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "agent"}, "Idempotency-Key", "k-exp").Status)
	requireProblem(t, s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "admin"}, "Idempotency-Key", "k-exp"), 422, "header.Idempotency-Key")
	// Age the record past its expiry (instead of sleeping for STRATA_IDEMPOTENCY_TTL).
	_, err := testenv.OwnerConn(t, s.DBURL).Exec(context.Background(),
		`UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE org_id = 'acme' AND key = 'k-exp'`)
	require.NoError(t, err)
	r := s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "admin"}, "Idempotency-Key", "k-exp")
	require.Equal(t, 201, r.Status, string(r.Body))
	require.Equal(t, "admin", r.Map(t)["role"])
}

func TestOneLogLinePerRequestWithoutBodies(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_LOG_LEVEL", "info"))
	r := s.Do("POST", "/v1/admin/keys", s.AdminKey, map[string]any{"role": "agent", "name": "body-marker-7781"}, "X-Request-Id", "log-req-1")
	require.Equal(t, 201, r.Status)
	var line string
	for _, l := range strings.Split(s.Logs(), "\n") {
		if strings.Contains(l, `"request_id":"log-req-1"`) {
			require.Empty(t, line, "exactly one line for the request")
			line = l
		}
	}
	require.Contains(t, line, `"route":"/v1/admin/keys"`)
	require.Contains(t, line, `"status":201`)
	require.NotContains(t, s.Logs(), "body-marker-7781")
	require.NotContains(t, s.Logs(), r.Map(t)["key"])
}

// The access log names the caller of every authenticated request (authentication runs
// inside the logging middleware), on successes and refusals alike, and an outer request
// served by in-process calls of the API (the Mem0 API) the caller those found.
func TestAccessLogNamesTheCaller(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_LOG_LEVEL", "info"))
	admin := s.NewKey("acme-log", "admin")
	agent := s.NewKey("acme-log", "agent")
	require.Equal(t, 200, s.Do("GET", "/v1/admin/keys", admin, nil, "X-Request-Id", "log-caller-200").Status)
	require.Equal(t, 403, s.Do("GET", "/v1/admin/keys", agent, nil, "X-Request-Id", "log-caller-403").Status)
	require.Equal(t, 401, s.Do("GET", "/v1/admin/keys", "sk_unknown", nil, "X-Request-Id", "log-caller-401").Status)
	r := s.Do("GET", "/mem0/v1/memories/?user_id=u1", "", nil, "Authorization", "Token "+agent, "X-Request-Id", "log-caller-mem0")
	require.Equal(t, 200, r.Status, string(r.Body))

	lines := map[string][]map[string]any{}
	for _, l := range strings.Split(s.Logs(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" {
			continue
		}
		if id, _ := m["request_id"].(string); strings.HasPrefix(id, "log-caller-") {
			lines[id] = append(lines[id], m)
		}
	}
	for _, id := range []string{"log-caller-200", "log-caller-403", "log-caller-401"} {
		require.Len(t, lines[id], 1, id)
	}
	require.Len(t, lines["log-caller-mem0"], 2, "the /mem0 request and the /v1 call it made")
	keyIDs := map[string]any{}
	for _, id := range []string{"log-caller-200", "log-caller-403", "log-caller-mem0"} {
		for _, l := range lines[id] {
			require.Equal(t, "acme-log", l["org_id"], "%s %s", id, l["route"])
			require.NotEmpty(t, l["key_id"], "%s %s", id, l["route"])
			require.NotContains(t, []any{admin, agent}, l["key_id"], "the key id, never the secret")
			keyIDs[id] = l["key_id"]
		}
	}
	require.NotEqual(t, keyIDs["log-caller-200"], keyIDs["log-caller-403"])
	require.Equal(t, keyIDs["log-caller-403"], keyIDs["log-caller-mem0"], "the same agent key")
	require.Empty(t, lines["log-caller-401"][0]["org_id"], "an unauthenticated request names no org")
}

// A problem names the field and what to do, and never repeats what was submitted: a large
// body (personal data, say) does not come back in its 4xx.
func TestProblemsNameTheFieldNotTheValue(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme-problems", "agent")
	marker := "personal-data-marker-"
	big := marker + strings.Repeat("x", 900<<10)

	small := func(r *apptest.Response) map[string]any {
		t.Helper()
		require.Less(t, len(r.Body), 4096, "the problem does not echo the body: %.300s", r.Body)
		require.NotContains(t, string(r.Body), marker)
		return r.Map(t)
	}
	detail := func(m map[string]any) string { return fmt.Sprint(m["detail"]) }

	// Validation failures with a 900 KB field beside them: huma would echo the whole body
	// (or the field) as errors[].value.
	r := s.Do("POST", "/v1/memories", agent, map[string]any{"text": big, "bogus": 1})
	requireProblem(t, r, 422, "")
	small(r)
	r = s.Do("PUT", "/v1/kv/ns/k", agent, map[string]any{"user_id": big})
	requireProblem(t, r, 422, "body.value")
	small(r)
	r = s.Do("POST", "/v1/jobs/j/steps/t/start", agent, map[string]any{"lease_seconds": 10, "input": map[string]any{"tool": big}})
	requireProblem(t, r, 422, "body.owner")
	small(r)

	// Malformed JSON: 400 says so, and where; the body is not repeated.
	r = s.Do("POST", "/v1/memories", agent, `{"text": "`+big+`",`+"\n"+`  }`)
	requireProblem(t, r, 400, "body")
	m := small(r)
	require.Contains(t, detail(m), "malformed JSON at line 2, column 3")

	// Not JSON: 415 says what to send.
	r = s.Do("POST", "/v1/memories", agent, `text=`+big, "Content-Type", "application/x-www-form-urlencoded")
	requireProblem(t, r, 415, "header.Content-Type")
	require.Contains(t, detail(small(r)), "Content-Type: application/json")

	// Too large: 413 says how to split it and which setting raises the limit.
	r = s.Do("POST", "/v1/memories", agent, map[string]any{"text": big + strings.Repeat("y", 200<<10)})
	requireProblem(t, r, 413, "")
	m = small(r)
	require.Contains(t, detail(m), "split it")
	require.Contains(t, detail(m), "STRATA_MAX_BODY_BYTES")
	// A field over its own limit says which setting that is.
	r = s.Do("PUT", "/v1/kv/ns/big", agent, map[string]any{"value": marker + strings.Repeat("v", 70<<10)})
	requireProblem(t, r, 413, "body.value")
	require.Contains(t, fmt.Sprint(small(r)["errors"]), "STRATA_KV_MAX_VALUE_BYTES")

	// Wrong role: 403 names the key needed.
	r = s.Do("GET", "/v1/admin/keys", agent, nil)
	requireProblem(t, r, 403, "")
	require.Contains(t, detail(r.Map(t)), "it needs an admin key")
	r = s.Do("GET", "/v1/audit", agent, nil)
	requireProblem(t, r, 403, "")
	require.Contains(t, detail(r.Map(t)), "it needs a compliance key (or an admin key)")
}

// An unexpected property's problem lists the properties allowed where it was found.
func TestUnexpectedPropertyListsTheAllowedOnes(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	agent := s.NewKey("acme-props", "agent")
	message := func(r *apptest.Response, location string) string {
		t.Helper()
		requireProblem(t, r, 422, location)
		for _, e := range r.Map(t)["errors"].([]any) {
			if e := e.(map[string]any); e["location"] == location {
				return fmt.Sprint(e["message"])
			}
		}
		return ""
	}
	r := s.Do("POST", "/v1/jobs/j/steps/s/start", agent, map[string]any{"owner": "w", "input": map[string]any{"tool": "ffmpeg", "args": []string{"-y"}}})
	require.Equal(t, "unexpected property; allowed: model, params, tool", message(r, "body.input.args"))
	r = s.Do("POST", "/v1/memories", agent, map[string]any{"text": "ok", "org_id": "other"})
	require.Contains(t, message(r, "body.org_id"), "allowed: agent_id, ")
	r = s.Do("POST", "/v1/jobs/j/events", agent, []map[string]any{{"op": "a"}, {"op": "b", "colour": 1}})
	require.Contains(t, message(r, "body[1].colour"), "allowed: ")
}
