package httpapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

func TestKeysLifecycle(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)

	// Missing and unknown keys → 401.
	require.Equal(t, 401, s.Do("GET", "/v1/admin/keys", "", nil).Status)
	require.Equal(t, 401, s.Do("GET", "/v1/admin/keys", "sk_nope", nil).Status)

	admin := s.NewKey("acme", "admin")
	agent := s.NewKey("acme", "agent")

	// Wrong role → 403.
	r := s.Do("GET", "/v1/admin/keys", agent, nil)
	require.Equal(t, 403, r.Status)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))

	// An org admin lists its own org's keys, never secrets.
	r = s.Do("GET", "/v1/admin/keys", admin, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var list struct {
		Items []map[string]any `json:"items"`
	}
	r.JSON(t, &list)
	require.Len(t, list.Items, 2)
	for _, k := range list.Items {
		require.NotContains(t, k, "key")
		require.Equal(t, "acme", k["org_id"])
	}
	// ... and may not create keys for another org.
	require.Equal(t, 403, s.Do("POST", "/v1/admin/keys", admin, map[string]any{"org_id": "other", "role": "agent"}).Status)

	// Revocation takes effect at once.
	var agentID string
	for _, k := range list.Items {
		if k["role"] == "agent" {
			agentID = k["id"].(string)
		}
	}
	require.Equal(t, 200, s.Do("DELETE", "/v1/admin/keys/"+agentID, admin, nil).Status)
	require.Equal(t, 401, s.Do("GET", "/v1/admin/keys", agent, nil).Status)

	// Another org's admin cannot see or revoke acme's keys: 404, no existence leak.
	other := s.NewKey("other", "admin")
	require.Equal(t, 404, s.Do("DELETE", "/v1/admin/keys/"+agentID, other, nil).Status)
}
