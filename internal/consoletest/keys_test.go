package consoletest

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestConsoleKeys: an admin creates a key in the console (the secret is shown once, the
// same form sent twice is one key), signs in with it elsewhere, revokes it (that session
// ends), and both writes are audited via the console; without the CSRF token nothing is
// created; an agent key gets no keys page.
func TestConsoleKeys(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	org := "console-keys"
	admin := s.NewKey(org, "admin")
	b := newBrowser(t, s)
	b.signIn(admin)
	_, body := b.get("/console/keys")
	require.Contains(t, body, `action="/console/keys"`)

	form := url.Values{"csrf": {b.csrf}, "form_id": {"k1"}, "role": {"compliance"}, "name": {"Dana <DPO>"}}
	resp, body := b.post("/console/keys", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	m := regexp.MustCompile(`<code id="new-secret">([^<]+)</code>`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	secret := m[1]
	require.Contains(t, body, "Dana &lt;DPO&gt;", "escaped")
	// The same form again (a double click): one key, its secret not shown again.
	resp, body = b.post("/console/keys", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NotContains(t, body, secret)
	var keys struct {
		Items []struct {
			ID        string  `json:"id"`
			Name      string  `json:"name"`
			RevokedAt *string `json:"revoked_at"`
		} `json:"items"`
	}
	s.Do("GET", "/v1/admin/keys", admin, nil).JSON(t, &keys)
	var id string
	for _, k := range keys.Items {
		if k.Name == "Dana <DPO>" {
			require.Empty(t, id, "one key for the form sent twice")
			id = k.ID
		}
	}
	require.NotEmpty(t, id)

	// Without the CSRF token: refused, nothing created.
	resp, _ = b.post("/console/keys", url.Values{"form_id": {"k2"}, "role": {"agent"}, "name": {"no-csrf"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	// A bad role: the API's problem, naming the field.
	resp, body = b.post("/console/keys", url.Values{"csrf": {b.csrf}, "form_id": {"k3"}, "role": {"root"}})
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, body)
	require.Contains(t, body, "body.role")

	// The new key signs in elsewhere; revoking it ends that session.
	other := newBrowser(t, s)
	other.signIn(secret)
	resp, _ = other.get("/console/subjects?user_id=x")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, _ = b.get("/console/keys")
	resp, body = b.post("/console/keys/"+id+"/revoke", url.Values{"csrf": {b.csrf}, "form_id": {"r1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	_, body = b.get(resp.Header.Get("Location"))
	require.Contains(t, body, "revoked")
	resp, _ = other.get("/console/subjects?user_id=x")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "/console/login")

	for _, action := range []string{"create-key", "revoke-key"} {
		var recs struct {
			Items []struct {
				Details map[string]any `json:"details"`
			} `json:"items"`
		}
		s.Do("GET", "/v1/audit?action="+action, admin, nil).JSON(t, &recs)
		require.NotEmpty(t, recs.Items, action)
		require.Equal(t, "console", recs.Items[len(recs.Items)-1].Details["via"], action)
	}

	ag := newBrowser(t, s)
	ag.signIn(s.NewKey(org, "agent"))
	resp, _ = ag.get("/console/keys")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// TestConsoleTimelineAttempts: a job's timeline lists every attempt of a step (holder,
// token, input, outcome, error) and the job's forks.
func TestConsoleTimelineAttempts(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	agent := s.NewKey("console-tl", "agent")
	ok := func(method, path string, body any, hdr ...string) map[string]any {
		t.Helper()
		r := s.Do(method, path, agent, body, hdr...)
		require.Less(t, r.Status, 300, "%s %s: %s", method, path, r.Body)
		return r.Map(t)
	}
	ok("PUT", "/v1/jobs/render", map[string]any{"goal": "render"})
	c := ok("POST", "/v1/jobs/render/steps/encode/start", map[string]any{"owner": "w-1", "input": map[string]any{"params": map[string]any{"crf": 18}}})
	ok("POST", "/v1/jobs/render/steps/encode/fail", map[string]any{"fencing_token": c["fencing_token"], "error": "<disk full>", "disposition": "retryable"})
	c = ok("POST", "/v1/jobs/render/steps/encode/start", map[string]any{"owner": "w-2", "input": map[string]any{"params": map[string]any{"crf": 23}}})
	ok("POST", "/v1/jobs/render/steps/encode/complete", map[string]any{"fencing_token": c["fencing_token"], "result": "ok"})
	ok("PUT", "/v1/jobs/render/checkpoint", map[string]any{"next_action": "ship"}, "If-Match", "0")
	ok("POST", "/v1/jobs/render/checkpoints/1/fork", map[string]any{"new_job_id": "render-alt"})

	b := newBrowser(t, s)
	b.signIn(agent)
	resp, body := b.get("/console/jobs/render")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Every attempt (2)")
	first := regexp.MustCompile(`(?s)<tr class="attempt failed" id="attempt-encode-1">.*?</tr>`).FindString(body)
	require.NotEmpty(t, first, body)
	require.Contains(t, first, "<code>w-1</code>")
	require.Contains(t, first, `&#34;crf&#34;: 18`)
	require.Contains(t, first, "&lt;disk full&gt;")
	second := regexp.MustCompile(`(?s)<tr class="attempt completed" id="attempt-encode-2">.*?</tr>`).FindString(body)
	require.Contains(t, second, "<code>w-2</code>")
	require.Contains(t, body, `href="/console/jobs/render-alt"`)
	_, body = b.get("/console/jobs/render-alt")
	require.NotContains(t, body, `href="/console/jobs/render-alt">render-alt`, "a fork has no forks of its own")
}
