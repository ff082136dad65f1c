package httpapi_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// TestWorkingPop: POST .../messages/pop removes the newest turn from the buffer and the
// durable log and answers it; seqs are not reused; a retried pop (same Idempotency-Key) is
// one pop; an empty, unknown or other org's session is 404; after Redis lost the session,
// the pop works from Postgres and the restored buffer has the turn gone.
func TestWorkingPop(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_TURN_BUFFER", "3"))
	key, other := s.NewKey("acme", "agent"), s.NewKey("globex", "agent")
	mp := "/v1/sessions/pop-1/messages"
	for i := 1; i <= 4; i++ {
		r := s.Do("POST", mp, key, map[string]any{"role": "user", "content": fmt.Sprintf("m%d", i), "user_id": "u1",
			"metadata": map[string]any{"i": i}})
		require.Equal(t, 201, r.Status, string(r.Body))
	}
	seqs := func(items []turnResp) []int64 {
		out := []int64{}
		for _, t := range items {
			out = append(out, t.Seq)
		}
		return out
	}

	r := s.Do("POST", mp+"/pop", key, nil, "Idempotency-Key", "pop-a")
	require.Equal(t, 200, r.Status, string(r.Body))
	var popped turnResp
	r.JSON(t, &popped)
	require.Equal(t, int64(4), popped.Seq)
	require.Equal(t, "m4", popped.Content)
	require.Equal(t, 4.0, popped.Metadata["i"])
	// The retry replays the answer and pops nothing more.
	r = s.Do("POST", mp+"/pop", key, nil, "Idempotency-Key", "pop-a")
	require.Equal(t, 200, r.Status)
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, []int64{1, 2, 3}, seqs(decodeTurns(t, s.Do("GET", mp+"?after_seq=0", key, nil)).Items))
	require.Equal(t, []int64{1, 2, 3}, seqs(decodeTurns(t, s.Do("GET", mp, key, nil)).Items))

	// Seqs are not reused: the next turn is 5.
	r = s.Do("POST", mp, key, map[string]any{"role": "assistant", "content": "m5"})
	require.Equal(t, 201, r.Status, string(r.Body))
	var tr turnResp
	r.JSON(t, &tr)
	require.Equal(t, int64(5), tr.Seq)

	// Redis loses the session: the pop reads and deletes in Postgres; the buffer is restored without it.
	flushPrefix(t, s.Prefix)
	r = s.Do("POST", mp+"/pop", key, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	r.JSON(t, &popped)
	require.Equal(t, int64(5), popped.Seq)
	require.Equal(t, []int64{1, 2, 3}, seqs(decodeTurns(t, s.Do("GET", mp, key, nil)).Items))

	// Another org's key, an unknown session, and an emptied one are 404.
	require.Equal(t, 404, s.Do("POST", mp+"/pop", other, nil).Status)
	require.Equal(t, 404, s.Do("POST", "/v1/sessions/nope/messages/pop", key, nil).Status)
	for range 3 {
		require.Equal(t, 200, s.Do("POST", mp+"/pop", key, nil).Status)
	}
	require.Equal(t, 404, s.Do("POST", mp+"/pop", key, nil).Status)
	require.Empty(t, decodeTurns(t, s.Do("GET", mp, key, nil)).Items)
	// State and scope survive: the session is still the user's.
	r = s.Do("POST", mp, key, map[string]any{"role": "user", "content": "again", "user_id": "someone-else"})
	require.Equal(t, 409, r.Status, string(r.Body))
}
