package httpapi_test

import (
	"bufio"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestEventStreamEndsWhenKeyRevoked: a revoked key's open SSE stream went on delivering
// the org's events until the request timeout. Revoking the key (on another replica) ends
// the stream within seconds now.
func TestEventStreamEndsWhenKeyRevoked(t *testing.T) {
	t.Parallel()
	a := apptest.Start(t)
	// A second replica on the same database: the revocation reaches it by notification.
	b := apptest.Start(t, apptest.Env("STRATA_DATABASE_URL", a.DBURL))
	admin := a.NewKey("acme", "admin")
	agent := a.NewKey("acme", "agent")
	r := a.Do("GET", "/v1/admin/keys", admin, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var agentID string
	for _, k := range items(t, r) {
		if k["role"] == "agent" {
			agentID = k["id"].(string)
		}
	}
	require.NotEmpty(t, agentID)

	open := func(s *apptest.Server) <-chan struct{} {
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/events/stream", nil)
		req.Header.Set("Authorization", "Bearer "+agent)
		resp, err := s.Client.Do(req)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		ended := make(chan struct{})
		go func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
			}
			close(ended)
		}()
		return ended
	}
	onA, onB := open(a), open(b)
	time.Sleep(300 * time.Millisecond) // kept: both streams reach their wait before the revocation
	require.Equal(t, 200, b.Do("DELETE", "/v1/admin/keys/"+agentID, admin, nil).Status)
	start := time.Now()
	for name, ended := range map[string]<-chan struct{}{"the other replica": onA, "the revoking replica": onB} {
		select {
		case <-ended:
			t.Logf("the stream on %s closed %v after the revocation", name, time.Since(start))
		case <-time.After(6*time.Second - time.Since(start)):
			t.Fatalf("the revoked key's stream on %s was still open 6 s after the revocation", name)
		}
	}
}
