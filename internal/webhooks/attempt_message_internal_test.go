package webhooks

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAttemptErrorsDiscloseNothing (issue 57): a failed delivery's recorded error (which
// the subscription's admin reads in its delivery log) was the HTTP client's own text: the
// address a name resolved to at delivery time (a rebinding probe) and the resolver's
// address. It is a fixed text now.
func TestAttemptErrorsDiscloseNothing(t *testing.T) {
	t.Parallel()
	rc := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(rc.Close)
	ctx := context.Background()
	tg := target{url: rc.URL, secrets: []string{NewSecret()}}

	// The dialer refuses 127.0.0.1 (as it would a name rebound to it after the check).
	w := &Deliverer{Client: NewClient(2*time.Second, false), RequestTimeout: 2 * time.Second}
	_, _, err := w.post(ctx, tg, "msg_1", []byte(`{}`))
	require.ErrorIs(t, err, ErrBlockedAddress)
	require.Equal(t, "refused: resolves to a private or loopback address", err.Error())

	// The resolver fails: what a real dialer answers, without asking a real DNS server.
	dnsFail := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host",
			Name: "hooks.example.com", Server: "10.255.255.53:53", IsNotFound: true}}
	}}}
	w = &Deliverer{Client: dnsFail, RequestTimeout: 2 * time.Second}
	_, _, err = w.post(ctx, target{url: "http://hooks.example.com/x", secrets: tg.secrets}, "msg_2", []byte(`{}`))
	require.Error(t, err)
	require.Equal(t, "the host does not resolve", err.Error())

	// Refused connections say so, without the address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String() + "/"
	ln.Close()
	w = &Deliverer{Client: NewClient(2*time.Second, true), RequestTimeout: 2 * time.Second}
	_, _, err = w.post(ctx, target{url: closed, secrets: tg.secrets}, "msg_3", []byte(`{}`))
	require.Error(t, err)
	require.Equal(t, "connection refused", err.Error())

	// A certificate the client does not trust: said so, without the names it was valid for.
	tlsrc := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tlsrc.Close)
	_, _, err = w.post(ctx, target{url: tlsrc.URL, secrets: tg.secrets}, "msg_4", []byte(`{}`))
	require.Error(t, err)
	require.Equal(t, "the receiver's TLS certificate was not accepted", err.Error())
}
