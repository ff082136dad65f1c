package consoletest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestConsoleOperatorPages drives the operator and admin pages over HTTP (the browser suite
// covers the compliance flows and the stalled job): a job's events with a revert and a
// checkpoint diff, key-value resolution with the level that answered, quarantines created
// and released, a policy saved and an eviction previewed, the keys page, errors naming fields.
func TestConsoleOperatorPages(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	org := "console-ops"
	agent := s.NewKey(org, "agent")
	admin := s.NewKey(org, "admin")
	do := func(method, path string, body any, hdr ...string) map[string]any {
		t.Helper()
		r := s.Do(method, path, agent, body, hdr...)
		require.Less(t, r.Status, 300, "%s %s: %s", method, path, r.Body)
		if len(r.Body) == 0 {
			return nil
		}
		return r.Map(t)
	}
	do("PUT", "/v1/jobs/trip", map[string]any{"goal": "Plan the <b>trip</b>", "agent_id": "planner"})
	do("POST", "/v1/jobs/trip/events", map[string]any{"op": "book.hotel", "params": map[string]any{"city": "Lyon"}})
	do("POST", "/v1/jobs/trip/events/1/revert", map[string]any{"reason": "wrong city"})
	do("PUT", "/v1/jobs/trip/checkpoint", map[string]any{"current_step": "hotel", "state": map[string]any{"city": "Lyon", "nights": 2}}, "If-Match", "0")
	do("PUT", "/v1/jobs/trip/checkpoint", map[string]any{"current_step": "train", "state": map[string]any{"city": "Paris", "seat": "window"}}, "If-Match", "1")
	do("PUT", "/v1/kv/prefs/lang", map[string]any{"value": "fr"})
	do("PUT", "/v1/kv/prefs/lang", map[string]any{"value": "de", "user_id": "u-kv"})
	do("PUT", "/v1/kv/prefs/units", map[string]any{"value": "metric"})

	b := newBrowser(t, s)
	b.signIn(agent)
	resp, body := b.get("/console/jobs/trip")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Plan the &lt;b&gt;trip&lt;/b&gt;", "escaped")
	require.Contains(t, body, "book.hotel")
	require.Contains(t, body, "reverts #1")
	require.Contains(t, body, "Changes from version 1 to 2")
	for _, want := range []string{`<td><code>state.city</code></td><td>changed</td><td><code>&#34;Lyon&#34;</code></td><td><code>&#34;Paris&#34;</code>`,
		`<td><code>state.nights</code></td><td>removed</td>`, `<td><code>state.seat</code></td><td>added</td>`,
		`<td><code>current_step</code></td><td>changed</td>`} {
		require.Contains(t, body, want)
	}

	_, body = b.get("/console/kv?namespace=prefs&user_id=u-kv")
	require.Regexp(t, `<code>lang</code></td><td><span class="badge">user</span></td><td><code>&#34;de&#34;</code>`, body)
	require.Regexp(t, `<code>units</code></td><td><span class="badge">org</span></td><td><code>&#34;metric&#34;</code>`, body)

	// An invalid scope shows the problem and its field.
	resp, body = b.get("/console/kv?namespace=prefs&user_id=" + url.QueryEscape("bad id!"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `class="problem"`)
	require.Contains(t, body, "<code>query.user_id</code>")

	// An unknown job: the API's 404 detail.
	resp, body = b.get("/console/jobs/nope")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, body, `class="problem"`)

	// Admin pages are not for agent keys.
	resp, _ = b.get("/console/policies")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	ab := newBrowser(t, s)
	ab.signIn(admin)
	_, body = ab.get("/console/quarantines")
	require.Contains(t, body, "No quarantines")
	resp, body = ab.post("/console/quarantines", url.Values{"csrf": {ab.csrf}, "form_id": {"q1"}, "agent_id": {"planner"},
		"since": {time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}, "reason": {"poisoned"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	_, body = ab.get("/console/quarantines")
	require.Contains(t, body, "agent planner")
	i := strings.Index(body, `action="/console/quarantines/`)
	require.Positive(t, i)
	action := body[i+len(`action="`):]
	action = action[:strings.Index(action, `"`)]
	require.True(t, strings.HasSuffix(action, "/release"), action)
	resp, body = ab.post(action, url.Values{"csrf": {ab.csrf}, "form_id": {"q2"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	r := s.Do("GET", "/v1/admin/quarantines", admin, nil)
	require.Contains(t, string(r.Body), `"status":"released"`)

	// A refused quarantine names its field.
	resp, body = ab.post("/console/quarantines", url.Values{"csrf": {ab.csrf}, "form_id": {"q3"}, "since": {"yesterday"}})
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, body)
	require.Contains(t, body, "body.since")

	// Policies: save one edited, preview eviction.
	pol := map[string]any{"working": map[string]any{"session_ttl": "7d"}}
	_, body = ab.get("/console/policies")
	require.Contains(t, body, "The defaults")
	polJSON, err := json.MarshalIndent(pol, "", "  ")
	require.NoError(t, err)
	resp, body = ab.post("/console/policies", url.Values{"csrf": {ab.csrf}, "form_id": {"p1"}, "policy": {string(polJSON)}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	_, body = ab.get("/console/policies?notice=x")
	require.Contains(t, body, "Stored policy version 1")
	require.Contains(t, body, "&#34;session_ttl&#34;: &#34;7d&#34;")
	resp, body = ab.post("/console/policies", url.Values{"csrf": {ab.csrf}, "form_id": {"p2"}, "policy": {"{not json"}})
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, body)
	require.Contains(t, body, "<code>policy</code>")
	resp, body = ab.post("/console/policies/preview", url.Values{"csrf": {ab.csrf}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `id="preview"`)
	_, body = ab.get("/console/keys")
	require.Contains(t, body, ">agent<")
	require.Contains(t, body, ">admin<")

	// Every console write is audited as the signed-in key, via the console.
	for _, action := range []string{"create-quarantine", "release-quarantine", "put-policies"} {
		var recs struct {
			Items []struct {
				ActorRole string         `json:"actor_role"`
				Details   map[string]any `json:"details"`
			} `json:"items"`
		}
		s.Do("GET", "/v1/audit?action="+action, admin, nil).JSON(t, &recs)
		require.Len(t, recs.Items, 1, action)
		require.Equal(t, "admin", recs.Items[0].ActorRole)
		require.Equal(t, "console", recs.Items[0].Details["via"], action)
	}
}
