package client_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

func TestKeysAndAudit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	root := client.New(s.URL, s.AdminKey)

	k, err := root.CreateKey(ctx, "acme", "admin", "ops")
	require.NoError(t, err)
	require.NotEmpty(t, k.Secret)
	admin := client.New(s.URL, k.Secret)
	agent, err := admin.CreateKey(ctx, "", "agent", "bot")
	require.NoError(t, err)
	require.Equal(t, "acme", agent.OrgID)

	page, err := admin.ListKeys(ctx, "", "", 1)
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.NotEmpty(t, page.NextCursor)
	page2, err := admin.ListKeys(ctx, "", page.NextCursor, 1)
	require.NoError(t, err)
	require.Len(t, page2.Items, 1)
	require.NotEqual(t, page.Items[0].ID, page2.Items[0].ID)

	_, err = client.New(s.URL, agent.Secret).ListKeys(ctx, "", "", 0)
	require.Equal(t, 403, client.StatusOf(err))
	var perr *client.Error
	require.ErrorAs(t, err, &perr)
	require.NotEmpty(t, perr.RequestID)

	_, err = admin.RevokeKey(ctx, "key_missing")
	require.True(t, client.IsNotFound(err))

	rep, err := admin.VerifyAudit(ctx)
	require.NoError(t, err)
	require.True(t, rep.OK)
	require.EqualValues(t, 1, rep.Checked)
	recs, err := admin.ListAudit(ctx, client.AuditFilter{Action: "create-key"}, "", 10)
	require.NoError(t, err)
	require.Len(t, recs.Items, 1)
}

// TestRetriesReuseTheIdempotencyKey loses the first response of a write on the way back
// (the server did the work); the client's retry carries the same key and gets the replay.
func TestRetriesReuseTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	target, _ := url.Parse(s.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var calls atomic.Int32
	var keys []string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if calls.Add(1) == 1 {
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, r) // the server commits...
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusBadGateway) // ...but the answer is lost
			_, _ = io.WriteString(w, `{"status":502,"title":"Bad Gateway"}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	c := client.New(front.URL, s.AdminKey, client.WithRetries(3, time.Millisecond, 10*time.Millisecond))
	k, err := c.CreateKey(ctx, "acme", "agent", "once")
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, keys[0], keys[1], "the retry reuses the Idempotency-Key")

	page, err := client.New(s.URL, s.AdminKey).ListKeys(ctx, "acme", "", 100)
	require.NoError(t, err)
	require.Len(t, page.Items, 1, "the write happened once")
	require.Equal(t, k.ID, page.Items[0].ID)
}
