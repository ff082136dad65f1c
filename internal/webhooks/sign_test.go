package webhooks_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/webhooks"
)

// TestSignMatchesTheStandardWebhooksVector signs the published test vector that the
// Standard Webhooks reference libraries (and Svix's, which they come from) check in their
// own sign tests: the same secret, message id, timestamp and payload must give exactly their
// signature, or no receiver using one of those libraries could verify us. (Recomputed
// independently too: Python's hmac over "msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{...}"
// with the base64-decoded key gives the same string.)
func TestSignMatchesTheStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	const (
		secret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		msgID   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts      = int64(1614265330)
		payload = `{"test": 2432232314}`
		want    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	got, err := webhooks.Sign(secret, msgID, ts, []byte(payload))
	require.NoError(t, err)
	require.Equal(t, want, got)

	require.True(t, webhooks.Verify(secret, msgID, ts, []byte(payload), want))
	// Among other signatures (a rotation's two, or a v1a the verifier does not know).
	require.True(t, webhooks.Verify(secret, msgID, ts, []byte(payload), "v1a,xyz v1,bm90IGl0 "+want))
	// Any change to what is signed breaks it.
	require.False(t, webhooks.Verify(secret, msgID, ts+1, []byte(payload), want))
	require.False(t, webhooks.Verify(secret, msgID+"x", ts, []byte(payload), want))
	require.False(t, webhooks.Verify(secret, msgID, ts, []byte(`{"test": 2432232315}`), want))
	require.False(t, webhooks.Verify("whsec_"+"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", msgID, ts, []byte(payload), want))
}
