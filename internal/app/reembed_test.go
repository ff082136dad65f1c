package app_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/app"
	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

func TestReembedCommandSwitchesTheModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	for _, text := range []string{"the logo goes bottom right", "captions use Inter 32px", "export at 25 fps"} {
		r := s.Do("POST", "/v1/memories", key, map[string]any{"text": text, "kind": "fact", "user_id": "u1"})
		require.Equal(t, 201, r.Status, string(r.Body))
	}
	env := map[string]string{"STRATA_DATABASE_URL": s.DBURL, "STRATA_EMBEDDING_DIMS": "64", "STRATA_LOG_LEVEL": "error"}
	var out, errb bytes.Buffer
	require.NoError(t, app.Run(ctx, []string{"server", "reembed"}, func(k string) string { return env[k] }, &out, &errb), errb.String())
	require.Contains(t, out.String(), "done in")

	owner := testenv.OwnerConn(t, s.DBURL)
	var n int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM memories WHERE dims = 64 AND vector_dims(embedding) = 64`).Scan(&n))
	require.Equal(t, 3, n, "every memory is served from the new space")

	out.Reset()
	require.NoError(t, app.Run(ctx, []string{"server", "reembed", "cleanup"}, func(k string) string { return env[k] }, &out, &errb), errb.String())
	require.Contains(t, out.String(), "dropped")
}
