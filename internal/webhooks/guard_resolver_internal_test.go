package webhooks

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/strata"
)

// TestCheckURLResolverErrorsAreFixedTexts: a name that does not resolve was refused with the
// resolver's error, which names the resolver's address; a name resolving to a private
// address quoted that address. Both are fixed texts now (the resolver is faked: no DNS).
func TestCheckURLResolverErrorsAreFixedTexts(t *testing.T) {
	t.Parallel()
	msg := func(err error) string {
		var fe *strata.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		require.Equal(t, "url", fe.Field)
		return fe.Msg
	}
	fail := func(context.Context, string, string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: "hooks.example.com", Server: "10.255.255.53:53", IsNotFound: true}
	}
	require.Equal(t, MsgUnresolved, msg(checkURL(context.Background(), "https://hooks.example.com/x", false, fail)))
	none := func(context.Context, string, string) ([]netip.Addr, error) { return nil, nil }
	require.Equal(t, MsgUnresolved, msg(checkURL(context.Background(), "https://hooks.example.com/x", false, none)))
	// One public and one private address: refused, neither named.
	mixed := func(context.Context, string, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("::ffff:0:10.0.0.7")}, nil
	}
	require.Equal(t, MsgBlocked, msg(checkURL(context.Background(), "https://hooks.example.com/x", false, mixed)))
	public := func(context.Context, string, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	require.NoError(t, checkURL(context.Background(), "https://hooks.example.com/x", false, public))
}
