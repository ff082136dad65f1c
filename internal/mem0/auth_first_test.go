package mem0_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestMem0AuthenticatesBeforeReadingTheBody: /mem0 read and validated up to 4 MiB of body
// before the key was checked, so anyone could make the server parse 4 MiB per request
// (and learn the API's validation rules) without a key. A request without a valid key is
// a 401 before the body is read; a valid key with a bad body is still a 422.
func TestMem0AuthenticatesBeforeReadingTheBody(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.NoAutoConsolidation())
	key := s.NewKey("mem0-auth", "agent")
	// 4 MiB that is not a valid add request (messages must be a list or a string).
	big := []byte(`{"messages": {"x": "` + strings.Repeat("a", 4<<20-40) + `"}}`)
	post := func(auth string, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, s.URL+"/mem0/v1/memories/", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := s.Client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	for _, auth := range []string{"", "Token sk_not_a_key", "Bearer sk_not_a_key"} {
		start := time.Now()
		code, body := post(auth, big)
		require.Equal(t, http.StatusUnauthorized, code, "auth %q: %s", auth, body)
		require.Less(t, time.Since(start), 3*time.Second)
		require.NotContains(t, body, "messages", "nothing about the body is said before the key is known")
		code, body = post(auth, []byte(`{"messages": 7}`))
		require.Equal(t, http.StatusUnauthorized, code, "auth %q: %s", auth, body)
	}
	code, body := post("Token "+key, []byte(`{"messages": 7}`))
	require.Equal(t, http.StatusUnprocessableEntity, code, "%s", body)
	code, body = post("Token "+key, big)
	require.Contains(t, []int{http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge}, code, "%s", body)
	// The ping of a bad key is a 401 as before; an unknown route without a key too.
	r := s.Do(http.MethodGet, "/mem0/v1/ping/", "", nil, "Authorization", "Token sk_not_a_key")
	require.Equal(t, http.StatusUnauthorized, r.Status, "%s", r.Body)
	r = s.Do(http.MethodGet, "/mem0/v1/ping/", "", nil, "Authorization", "Token "+key)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}
