package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/mcp"
)

// TestToolIdempotencyKeyBoundToTheCaller (issue 57): a tool call's idempotency_key travels
// as the Idempotency-Key of the REST call, so its record belongs to the caller's API key:
// another agent key of the org reusing it gets a tool error that says nothing of the first
// call, never its answer.
func TestToolIdempotencyKeyBoundToTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	target, _ := url.Parse(s.URL)
	tools := []mcp.Tool{{
		Name: "put_kv", Description: "Put a value", Method: "PUT", Path: "/v1/kv/{namespace}/{key}",
		Schema: map[string]any{"type": "object", "properties": map[string]any{
			"namespace": map[string]any{"type": "string"}, "key": map[string]any{"type": "string"},
			"value": map[string]any{"type": "string"}, "user_id": map[string]any{"type": "string"},
			"idempotency_key": map[string]any{"type": "string"}}, "required": []string{"namespace", "key"}},
	}}
	front := httptest.NewServer(mcp.Handler(httputil.NewSingleHostReverseProxy(target), tools, nil))
	t.Cleanup(front.Close)
	connect := func(key string) *sdk.ClientSession {
		c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
		sess, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: front.URL,
			HTTPClient: &http.Client{Transport: bearer{key: key, rt: http.DefaultTransport}}}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { sess.Close() })
		return sess
	}
	alice, mallory := connect(s.NewKey("acme", "agent")), connect(s.NewKey("acme", "agent"))
	call := func(sess *sdk.ClientSession, value string) (bool, string) {
		res, err := sess.CallTool(ctx, &sdk.CallToolParams{Name: "put_kv", Arguments: map[string]any{
			"namespace": "notes", "key": "plan", "value": value, "user_id": "u1", "idempotency_key": "mcp-1"}})
		require.NoError(t, err)
		return res.IsError, res.Content[0].(*sdk.TextContent).Text
	}
	isErr, text := call(alice, "alice-secret-plan")
	require.False(t, isErr, text)
	for _, v := range []string{"alice-secret-plan", "mallory-overwrite"} {
		isErr, text = call(mallory, v)
		require.True(t, isErr, text)
		require.Contains(t, text, "not available to this API key")
		require.NotContains(t, text, "alice-secret-plan")
	}
	isErr, text = call(alice, "alice-secret-plan")
	require.False(t, isErr, text)
	require.Contains(t, text, "alice-secret-plan", "the caller's own retry replays")
}
