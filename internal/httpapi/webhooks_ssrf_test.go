package httpapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestWebhookURLRefusalsDiscloseNothing (issue 57): an admin probing webhook URLs learned
// how the server's names resolve (the refusal quoted the resolved address) and could reach
// loopback through IPv6 forms the guard did not unwrap (::ffff:0:a.b.c.d). Every refused
// address is now one fixed message, whatever the form of the URL.
func TestWebhookURLRefusalsDiscloseNothing(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	admin := s.NewKey("ssrf57", "admin")
	const refused = "refused: resolves to a private or loopback address"
	for _, u := range []string{
		"http://vm/",                   // /etc/hosts: 127.0.0.1, without asking DNS
		"http://localhost:9/x",         //
		"http://[::ffff:127.0.0.1]/",   // IPv4-mapped
		"http://[::ffff:0:127.0.0.1]/", // IPv4-translated (SIIT)
		"http://[::ffff:7f00:1]/",
		"http://[::127.0.0.1]/",           // IPv4-compatible
		"http://[64:ff9b::10.0.0.1]/",     // NAT64 to a private address
		"http://[64:ff9b::a9fe:a9fe]/",    // NAT64 to the metadata address
		"http://[2002:a00:1::]/",          // 6to4 of 10.0.0.1
		"http://[2001:0:4136:e378::1]/",   // Teredo
		"http://0.0.0.0/", "http://[::]/", // unspecified
		"http://198.18.0.1/", "http://240.0.0.1/", "http://255.255.255.255/", "http://192.0.0.8/", // reserved
	} {
		r := s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": u, "event_types": []string{"*"}})
		requireProblem(t, r, 422, "body.url")
		var p struct {
			Errors []struct {
				Message string `json:"message"`
			} `json:"errors"`
		}
		r.JSON(t, &p)
		require.Len(t, p.Errors, 1, "%s: %s", u, r.Body)
		require.Equal(t, refused, p.Errors[0].Message, "%s: %s", u, r.Body)
		require.NotContains(t, string(r.Body), "127.0.0.1", u)
	}
	// Hosts that C resolvers and browsers read as IPv4 (2130706433 is 127.0.0.1): one fixed
	// message about the form, the host not echoed.
	for _, u := range []string{"http://2130706433/", "http://0177.0.0.1/", "http://0x7f.1/", "http://127.1/"} {
		r := s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": u, "event_types": []string{"*"}})
		requireProblem(t, r, 422, "body.url")
		require.Contains(t, string(r.Body), `"must name an IPv4 host as four decimal numbers (a.b.c.d)"`, u)
	}
	r := s.Do("GET", "/v1/admin/webhooks", admin, nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, items(t, r), "nothing was written")
}
