package mcp_test

import (
	"context"
	"encoding/json"
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

type bearer struct {
	key string
	rt  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.rt.RoundTrip(r)
}

// TestToolsDispatchToTheRESTAPI drives the MCP handler with the SDK's client; the tool
// calls land on a real server with the caller's key.
func TestToolsDispatchToTheRESTAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	target, _ := url.Parse(s.URL)
	api := httputil.NewSingleHostReverseProxy(target)
	tools := []mcp.Tool{{
		Name: "create_key", Description: "Create a key", Method: "POST", Path: "/v1/admin/keys",
		Schema: map[string]any{"type": "object", "properties": map[string]any{"role": map[string]any{"type": "string"}}},
	}, {
		Name: "revoke_key", Description: "Revoke a key", Method: "DELETE", Path: "/v1/admin/keys/{id}",
		Schema: map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}, "required": []string{"id"}},
	}}
	front := httptest.NewServer(mcp.Handler(api, tools, nil))
	t.Cleanup(front.Close)
	admin := s.NewKey("acme", "admin")

	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	sess, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: front.URL,
		HTTPClient: &http.Client{Transport: bearer{key: admin, rt: http.DefaultTransport}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close() })

	list, err := sess.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list.Tools, 2)

	res, err := sess.CallTool(ctx, &sdk.CallToolParams{Name: "create_key", Arguments: map[string]any{"role": "agent"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	var k map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &k))
	require.Equal(t, "acme", k["org_id"], "the tool ran with the caller's key")

	// A REST problem comes back as a tool error the model can read.
	res, err = sess.CallTool(ctx, &sdk.CallToolParams{Name: "create_key", Arguments: map[string]any{"role": "wizard"}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Content[0].(*sdk.TextContent).Text, "body.role")

	res, err = sess.CallTool(ctx, &sdk.CallToolParams{Name: "revoke_key", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Content[0].(*sdk.TextContent).Text, `missing required argument "id"`)

	res, err = sess.CallTool(ctx, &sdk.CallToolParams{Name: "revoke_key", Arguments: map[string]any{"id": k["id"]}})
	require.NoError(t, err)
	require.False(t, res.IsError, res.Content[0].(*sdk.TextContent).Text)
}
