package webhooks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/webhooks"
)

// requireRefused checks CheckURL refuses raw as an invalid "url" whose message says why.
func requireRefused(t *testing.T, raw string, allowPrivate bool, why string) {
	t.Helper()
	err := webhooks.CheckURL(context.Background(), raw, allowPrivate)
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe, raw)
	require.Equal(t, "url", fe.Field, raw)
	require.Contains(t, fe.Msg, why, raw)
}

// TestCheckURLRefusesEveryLoopbackSpelling: the spellings an attacker uses to reach the
// server's own loopback (or a private network) past a naive check. Each is refused at
// subscribe time for a stated reason, not because this machine's DNS happened to fail.
func TestCheckURLRefusesEveryLoopbackSpelling(t *testing.T) {
	t.Parallel()
	const numeric = "four decimal numbers"
	for _, u := range []string{
		"http://2130706433/",        // decimal: 127.0.0.1 as one number
		"http://0177.0.0.1/",        // octal first part
		"http://0x7f.0.0.1/",        // hex first part
		"http://0x7f000001/",        // hex, one number
		"http://0X7F.1/",            // hex, two parts, upper case
		"http://127.1/",             // two parts
		"http://127.0.0.1./",        // the root's dot after an address
		"http://169.254.169.254.1/", // five parts
		"http://0/",
	} {
		requireRefused(t, u, false, numeric)
		requireRefused(t, u, true, numeric) // ambiguous whatever the operator allows
	}

	const private = webhooks.MsgBlocked // the whole message: no address, no setting, no resolver
	for _, u := range []string{
		"http://[::ffff:0:127.0.0.1]/",                   // IPv4-translated (SIIT)
		"http://[::ffff:0:a00:1]/",                       // the same around 10.0.0.1
		"http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", // Teredo
		"http://198.18.0.1/", "http://240.0.0.1/", "http://255.255.255.255/", "http://192.0.0.170/",
		"http://[::ffff:127.0.0.1]/",        // IPv4-mapped IPv6
		"http://[::ffff:7f00:1]/",           // the same in hex
		"http://[0:0:0:0:0:ffff:10.0.0.1]/", // mapped, private
		"http://[::127.0.0.1]/",             // IPv4-compatible (deprecated)
		"http://[64:ff9b::127.0.0.1]/",      // NAT64 to loopback
		"http://[64:ff9b::a9fe:a9fe]/",      // NAT64 to the metadata address
		"http://[64:ff9b:1::808:808]/",      // local-use NAT64: the operator's own network
		"http://[2002:7f00:1::]/",           // 6to4 around 127.0.0.1
		"http://[2002:c0a8:101::1]/",        // 6to4 around 192.168.1.1
		"http://[fec0::1]/",                 // site-local
		"http://[fe80::1%25eth0]:8080/",     // link-local with a zone
		"http://[::1]/", "http://[::]/",
		"http://127.0.0.1/", "http://127.255.255.254:9000/", "http://0.0.0.0/", "http://10.0.0.1/",
		"http://172.16.0.1/", "http://192.168.0.1/", "http://169.254.169.254/latest/meta-data",
		"http://100.64.0.1/", "http://224.0.0.1/",
		"http://localhost/", "http://localhost./", "http://LOCALHOST:8080/", "http://api.localhost/",
		"http://api.localhost./x",
	} {
		requireRefused(t, u, false, private)
		err := webhooks.CheckURL(context.Background(), u, false)
		require.Equal(t, private, err.(*strata.FieldError).Msg, u)
	}

	// Credentials in the URL: the host is what follows the @, and the URL is refused anyway.
	requireRefused(t, "http://evil@127.0.0.1/", false, "credentials")
	requireRefused(t, "http://user:pass@example.com/", true, "credentials")
	requireRefused(t, "http://example.com@127.0.0.1/", true, "credentials")

	for _, u := range []string{"file:///etc/passwd", "gopher://127.0.0.1:6379/_FLUSHALL", "ftp://example.com/x",
		"dict://127.0.0.1:11211/", "ldap://example.com/", "javascript:alert(1)", "//example.com/x", "example.com/x",
		"http:///x", "http://", "https://:443/"} {
		requireRefused(t, u, true, "absolute http or https URL")
	}
	requireRefused(t, "https://example.com/#frag", true, "fragment")
	requireRefused(t, "https://example.com/"+strings.Repeat("a", 2000), true, "2000")

	// With the operator's permission, plain addresses and names pass without a lookup.
	for _, u := range []string{"http://127.0.0.1:8080/hook", "http://[::1]/", "http://localhost/", "https://example.com/"} {
		require.NoError(t, webhooks.CheckURL(context.Background(), u, true), u)
	}
	// A public address passes without it.
	for _, u := range []string{"https://93.184.216.34/hook", "http://[2606:4700::1111]/", "http://[64:ff9b::808:808]/",
		"http://[::ffff:8.8.8.8]/", "http://[2002:808:808::1]/"} {
		require.NoError(t, webhooks.CheckURL(context.Background(), u, false), u)
	}
}

func TestBlockedAddresses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "::127.0.0.1", "0.1.2.3", "::",
		"10.1.2.3", "172.31.255.255", "192.168.1.1", "fd00::1", "fec0::1", "169.254.169.254", "fe80::1", "100.127.0.1",
		"224.0.0.251", "ff02::1", "ff01::1", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b:1::1", "2002:a00:1::1",
		"::ffff:0:7f00:1", "::ffff:0:a00:1", "::ffff:0:0", "2001::1", "100::1", "2001:db8::1", "192.0.0.8", "198.19.1.1",
		"240.0.0.1", "255.255.255.255", "192.0.2.1"} {
		require.True(t, webhooks.Blocked(netip.MustParseAddr(s)), s)
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0", "2606:4700::1111", "64:ff9b::808:808",
		"2002:808:808::1", "::ffff:1.1.1.1", "::ffff:0:808:808"} {
		require.False(t, webhooks.Blocked(netip.MustParseAddr(s)), s)
	}
	require.True(t, webhooks.Blocked(netip.Addr{}), "the zero address")
}

// TestClientNeverFollowsRedirects: a receiver answering 3xx gets its answer recorded, and
// the client never calls the Location — not another local server, not the metadata
// address — whatever the guard allows. Without the operator's permission the loopback
// receiver itself is refused at dial time, whichever way its address is spelled.
func TestClientNeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	var hit atomic.Int32
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit.Add(1) }))
	t.Cleanup(inner.Close)
	for _, loc := range []string{inner.URL + "/internal", "http://169.254.169.254/latest/meta-data/", "http://[::1]:1/"} {
		for _, code := range []int{301, 302, 303, 307, 308} {
			outer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, loc, code)
			}))
			req, err := http.NewRequest(http.MethodPost, outer.URL, strings.NewReader(`{}`))
			require.NoError(t, err)
			resp, err := webhooks.NewClient(2*time.Second, true).Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, code, resp.StatusCode)
			require.Equal(t, loc, resp.Header.Get("Location"))
			outer.Close()
		}
	}
	require.Zero(t, hit.Load(), "a redirect was followed")

	guarded := webhooks.NewClient(2*time.Second, false)
	port := inner.URL[strings.LastIndexByte(inner.URL, ':')+1:]
	for _, u := range []string{inner.URL, "http://[::ffff:127.0.0.1]:" + port, "http://localhost:" + port} {
		_, err := guarded.Get(u)
		require.ErrorIs(t, err, webhooks.ErrBlockedAddress, u)
	}
	require.Zero(t, hit.Load())
}
