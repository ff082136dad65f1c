// Package consoletest tests the web console (internal/console) against a live server: the
// sessions, CSRF and headers from Go (no browser), and every page in Debian's Chromium
// driven by playwright-core (browser_test.go, tests/console).
package consoletest

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// browser is a cookie-keeping client that does not follow redirects (tests read them).
type browser struct {
	t    *testing.T
	s    *apptest.Server
	c    *http.Client
	csrf string
}

func newBrowser(t *testing.T, s *apptest.Server) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, s: s, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) get(path string) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.s.URL + path)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if m := csrfRe.FindStringSubmatch(string(body)); m != nil {
		b.csrf = m[1]
	}
	return resp, string(body)
}

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.PostForm(b.s.URL+path, form)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (b *browser) signIn(key string) {
	b.t.Helper()
	_, _ = b.get("/console/login")
	resp, body := b.post("/console/login", url.Values{"csrf": {b.csrf}, "key": {key}})
	require.Equal(b.t, http.StatusSeeOther, resp.StatusCode, body)
	resp, body = b.get("/console/")
	require.Equal(b.t, http.StatusSeeOther, resp.StatusCode, body)
	resp, body = b.get(resp.Header.Get("Location"))
	require.Equal(b.t, http.StatusOK, resp.StatusCode, body)
}

func sql(t *testing.T, s *apptest.Server, q string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.DBURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, q, args...)
	require.NoError(t, err)
}

func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	org := "console-go"
	compliance := s.NewKey(org, "compliance")
	agent := s.NewKey(org, "agent")

	t.Run("headers, cookie and sign-in", func(t *testing.T) {
		b := newBrowser(t, s)
		resp, _ := b.get("/console/subjects")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/console/login?next=%2Fconsole%2Fsubjects", resp.Header.Get("Location"))
		resp, body := b.get("/console/login")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		csp := resp.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "default-src 'self'")
		require.Contains(t, csp, "frame-ancestors 'none'")
		require.NotContains(t, csp, "unsafe-inline")
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
		require.NotContains(t, body, "<script>", "no inline script")
		require.NotContains(t, body, "style=", "no inline style")

		// The sign-in form itself needs its token.
		r2, _ := b.post("/console/login", url.Values{"key": {compliance}})
		require.Equal(t, http.StatusForbidden, r2.StatusCode)
		_, _ = b.get("/console/login")
		r2, body = b.post("/console/login", url.Values{"csrf": {b.csrf}, "key": {"sk_nope"}})
		require.Equal(t, http.StatusUnauthorized, r2.StatusCode)
		require.Contains(t, body, "Unknown or revoked API key")

		_, _ = b.get("/console/login")
		r2, _ = b.post("/console/login", url.Values{"csrf": {b.csrf}, "key": {compliance}, "next": {"/console/audit"}})
		require.Equal(t, http.StatusSeeOther, r2.StatusCode)
		require.Equal(t, "/console/audit", r2.Header.Get("Location"))
		var ck *http.Cookie
		for _, c := range r2.Cookies() {
			if c.Name == "strata_console" {
				ck = c
			}
		}
		require.NotNil(t, ck)
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		require.Equal(t, "/console", ck.Path)
		// The table holds the secret's hash and the key's id, never either secret.
		var n int
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, s.DBURL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE org_id = $1 AND role = 'compliance'
			AND key_id LIKE 'key_%' AND id_hash <> convert_to($2, 'UTF8')`, org, ck.Value).Scan(&n))
		require.Equal(t, 1, n)
		var leaked bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM console_sessions c
			WHERE position(convert_to($1, 'UTF8') in c.id_hash) > 0 OR c.key_id = $1 OR c.key_id = $2)`, compliance, ck.Value).Scan(&leaked))
		require.False(t, leaked)
		require.False(t, ck.Secure, "plain HTTP here")
		req, _ := http.NewRequest("GET", s.URL+"/console/login", nil)
		req.Header.Set("X-Forwarded-Proto", "https")
		tr, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		tr.Body.Close()
		require.Contains(t, tr.Header.Get("Set-Cookie"), "Secure", "behind a TLS proxy")
		// An open redirect after sign-in is refused.
		require.Equal(t, "", safeNextProbe(t, b, compliance, "https://evil.example/"))
	})

	t.Run("CSRF on every state-changing form", func(t *testing.T) {
		b := newBrowser(t, s)
		b.signIn(compliance)
		resp, body := b.post("/console/subjects/restrict", url.Values{"user_id": {"csrf-user"}, "form_id": {"f1"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
		require.Contains(t, body, "security token")
		resp, _ = b.post("/console/subjects/restrict", url.Values{"user_id": {"csrf-user"}, "csrf": {"forged"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		r := s.Do("GET", "/v1/gdpr/restrictions/csrf-user", compliance, nil)
		require.Equal(t, 200, r.Status)
		require.Equal(t, false, r.Map(t)["restricted"], "nothing was written")
		// With the token it goes through the API: audited as the key, via the console.
		_, _ = b.get("/console/subjects?user_id=csrf-user")
		resp, body = b.post("/console/subjects/restrict", url.Values{"user_id": {"csrf-user"}, "csrf": {b.csrf}, "form_id": {"f2"}, "reason": {"test"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
		// The same form submitted twice is one write (its Idempotency-Key).
		resp, body = b.post("/console/subjects/restrict", url.Values{"user_id": {"csrf-user"}, "csrf": {b.csrf}, "form_id": {"f2"}, "reason": {"test"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
		r = s.Do("GET", "/v1/audit?action=restrict-subject&user_id=csrf-user", compliance, nil)
		require.Equal(t, 200, r.Status, string(r.Body))
		var recs struct {
			Items []struct {
				ActorKeyID string         `json:"actor_key_id"`
				Details    map[string]any `json:"details"`
			} `json:"items"`
		}
		r.JSON(t, &recs)
		require.Len(t, recs.Items, 1, "one write for two submissions")
		require.Equal(t, "console", recs.Items[0].Details["via"])
		require.True(t, strings.HasPrefix(recs.Items[0].ActorKeyID, "key_"))
		// Lifting goes the same way.
		resp, body = b.post("/console/subjects/unrestrict", url.Values{"user_id": {"csrf-user"}, "csrf": {b.csrf}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
		require.Equal(t, false, s.Do("GET", "/v1/gdpr/restrictions/csrf-user", compliance, nil).Map(t)["restricted"])
	})

	t.Run("roles pick the pages", func(t *testing.T) {
		b := newBrowser(t, s)
		b.signIn(agent)
		resp, body := b.get("/console/subjects?user_id=u1")
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.Contains(t, body, "needs a compliance key")
		resp, body = b.get("/console/jobs")
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.NotContains(t, body, `href="/console/subjects"`)
	})

	t.Run("logout ends the session", func(t *testing.T) {
		b := newBrowser(t, s)
		b.signIn(compliance)
		_, _ = b.get("/console/erasures")
		resp, _ := b.post("/console/logout", url.Values{"csrf": {b.csrf}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		resp, _ = b.get("/console/erasures")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Location"), "/console/login")
	})

	t.Run("idle and absolute expiry", func(t *testing.T) {
		ib := newBrowser(t, s)
		idleKey := s.NewKey("console-idle", "compliance")
		ib.signIn(idleKey)
		sql(t, s, `UPDATE console_sessions SET last_seen_at = now() - interval '31 minutes' WHERE org_id = 'console-idle'`)
		resp, _ := ib.get("/console/erasures")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/console/login?next=%2Fconsole%2Ferasures&why=expired", resp.Header.Get("Location"))

		ab := newBrowser(t, s)
		absKey := s.NewKey("console-abs", "compliance")
		ab.signIn(absKey)
		sql(t, s, `UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE org_id = 'console-abs'`)
		resp, _ = ab.get("/console/erasures")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Location"), "why=expired")
	})

	t.Run("a revoked key ends its sessions", func(t *testing.T) {
		b := newBrowser(t, s)
		key := s.NewKey("console-revoke", "compliance")
		b.signIn(key)
		resp, _ := b.get("/console/erasures")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		admin := s.NewKey("console-revoke", "admin")
		r := s.Do("GET", "/v1/admin/keys", admin, nil)
		var keys struct {
			Items []struct {
				ID   string `json:"id"`
				Role string `json:"role"`
			} `json:"items"`
		}
		r.JSON(t, &keys)
		for _, k := range keys.Items {
			if k.Role == "compliance" {
				require.Equal(t, 200, s.Do("DELETE", "/v1/admin/keys/"+k.ID, admin, nil).Status)
			}
		}
		resp, _ = b.get("/console/erasures")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Location"), "why=expired")
	})
}

func safeNextProbe(t *testing.T, b *browser, key, next string) string {
	_, _ = b.get("/console/login")
	resp, _ := b.post("/console/login", url.Values{"csrf": {b.csrf}, "key": {key}, "next": {next}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	if loc := resp.Header.Get("Location"); loc != "/console/" {
		return loc
	}
	return ""
}
