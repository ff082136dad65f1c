package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestClaimBindsTheRecordToItsAPIKey (issue 57; migration 0046, expand only): a record is
// replayed to the API key that made it; another key gets ErrOtherKey whatever its request.
// Records of the previous release (key_binding NULL) replay as before; one it took over
// (a new request_hash under an old binding) replays to nobody.
func TestClaimBindsTheRecordToItsAPIKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	claim := func(c idempotency.Claimant) (*idempotency.Response, error) {
		var out *idempotency.Response
		err := pg.InOrgTx(ctx, pool, "a", func(tx pgx.Tx) error {
			r, err := idempotency.Claim(ctx, tx, "a", c, time.Hour, time.Second)
			if err != nil {
				return err
			}
			out = r
			if r == nil {
				return idempotency.Complete(ctx, tx, "a", c.Key, 201, nil, []byte(`{"secret":1}`))
			}
			return nil
		})
		return out, err
	}
	req := func(key, apiKey string, body byte) idempotency.Claimant {
		return idempotency.Claimant{Key: key, Method: "POST", Path: "/x", APIKeyID: apiKey, Hash: []byte{body}}
	}

	r, err := claim(req("k1", "alice", 1))
	require.NoError(t, err)
	require.Nil(t, r, "claimed: the request runs")
	r, err = claim(req("k1", "alice", 1))
	require.NoError(t, err)
	require.Equal(t, `{"secret":1}`, string(r.Body), "the maker's retry replays")
	_, err = claim(req("k1", "alice", 2))
	require.ErrorIs(t, err, idempotency.ErrMismatch)
	for _, body := range []byte{1, 2} {
		_, err = claim(req("k1", "mallory", body))
		require.ErrorIs(t, err, idempotency.ErrOtherKey, "another key learns nothing, same body or not")
	}

	// The previous release's insert names no key_binding: NULL, replayed as before.
	_, err = owner.Exec(ctx, `INSERT INTO idempotency_keys (org_id, key, request_hash, method, path, response_status, response_body, expires_at)
		VALUES ('a', 'k2', '\x01', 'POST', '/x', 201, '{"old":1}', now() + interval '1 hour')`)
	require.NoError(t, err)
	r, err = claim(req("k2", "anyone", 1))
	require.NoError(t, err)
	require.Equal(t, `{"old":1}`, string(r.Body))

	// The previous release took over an expired record: new request_hash, old binding.
	_, err = owner.Exec(ctx, `UPDATE idempotency_keys SET request_hash = '\x03' WHERE org_id = 'a' AND key = 'k1'`)
	require.NoError(t, err)
	for _, who := range []string{"alice", "mallory"} {
		_, err = claim(req("k1", who, 3))
		require.ErrorIs(t, err, idempotency.ErrOtherKey, "a stale binding replays to nobody")
	}
}
