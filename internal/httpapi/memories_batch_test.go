package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

type batchResp struct {
	Items []struct {
		Index       int      `json:"index"`
		Status      string   `json:"status"`
		Memory      *memResp `json:"memory"`
		DuplicateOf *int     `json:"duplicate_of"`
		Dedup       *struct {
			Reason string `json:"reason"`
		} `json:"dedup"`
		Error *struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
			Errors []struct {
				Location string `json:"location"`
			} `json:"errors"`
		} `json:"error"`
	} `json:"items"`
	Created, Deduplicated, Failed int
}

func TestMemoriesBatch(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Env("STRATA_DEDUP_THRESHOLD", "0.88"))
	key := s.NewKey("acme", "agent")
	_, stored := create(t, s, key, map[string]any{"text": "User prefers dark mode.", "user_id": "u1"})

	big := map[string]any{"blob": strings.Repeat("x", 17<<10)}
	body := map[string]any{"memories": []map[string]any{
		{"text": "user prefers DARK mode.", "user_id": "u1"},                                                  // 0: exact duplicate of the stored memory
		{"text": "The studio palette is teal", "user_id": "u1", "kind": "preference"},                         // 1: new
		{"text": "the studio palette is teal", "user_id": "u1"},                                               // 2: duplicate of item 1
		{"text": "exports are due on fridays", "user_id": "u1", "metadata": big},                              // 3: refused by the tier
		{"text": "exports are due on fridays", "user_id": "u2", "agent_id": "planner"},                        // 4: new
		{"text": "The studio palette is teal", "user_id": "u2", "provenance": map[string]any{"job_id": "j9"}}, // 5: another scope: new
	}}
	r := s.Do("POST", "/v1/memories/batch", key, body, "Idempotency-Key", "batch-1")
	require.Equal(t, 200, r.Status, string(r.Body))
	var out batchResp
	r.JSON(t, &out)
	require.Len(t, out.Items, 6)
	require.Equal(t, []int{3, 2, 1}, []int{out.Created, out.Deduplicated, out.Failed})
	require.Equal(t, "deduplicated", out.Items[0].Status)
	require.Equal(t, stored.ID, out.Items[0].Memory.ID)
	require.Equal(t, "exact", out.Items[0].Dedup.Reason)
	require.Nil(t, out.Items[0].DuplicateOf)
	require.Equal(t, "created", out.Items[1].Status)
	require.Equal(t, "preference", out.Items[1].Memory.Kind)
	require.Equal(t, "deduplicated", out.Items[2].Status)
	require.Equal(t, 1, *out.Items[2].DuplicateOf)
	require.Equal(t, out.Items[1].Memory.ID, out.Items[2].Memory.ID)
	require.Equal(t, "failed", out.Items[3].Status)
	require.Nil(t, out.Items[3].Memory)
	require.Equal(t, 422, out.Items[3].Error.Status)
	require.Equal(t, "body.memories[3].metadata", out.Items[3].Error.Errors[0].Location)
	require.Equal(t, "created", out.Items[4].Status)
	require.Equal(t, "u2", out.Items[4].Memory.UserID)
	require.Equal(t, "j9", out.Items[5].Memory.Provenance.JobID)
	require.NotEmpty(t, out.Items[5].Memory.Provenance.KeyID)
	require.Equal(t, 4, ownerCount(t, s, `SELECT count(*) FROM memories`))

	// The batch's memories are searchable at once.
	found := search(t, s, key, map[string]any{"query": "studio palette teal", "user_id": "u1"})
	require.Contains(t, found.texts(), "The studio palette is teal")

	// A retry replays the first answer and writes nothing.
	again := s.Do("POST", "/v1/memories/batch", key, body, "Idempotency-Key", "batch-1")
	require.Equal(t, 200, again.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(r.Body), string(again.Body))
	require.Equal(t, 4, ownerCount(t, s, `SELECT count(*) FROM memories`))
	require.Equal(t, 1, ownerCount(t, s, `SELECT count(*) FROM audit_log WHERE action = 'create-memories'`),
		"one audit record for the batch")

	// Another org's batch sees none of acme's memories.
	other := s.NewKey("globex", "agent")
	r = s.Do("POST", "/v1/memories/batch", other, map[string]any{"memories": []map[string]any{{"text": "User prefers dark mode.", "user_id": "u1"}}})
	require.Equal(t, 200, r.Status, string(r.Body))
	var o batchResp
	r.JSON(t, &o)
	require.Equal(t, "created", o.Items[0].Status)
	require.NotEqual(t, stored.ID, o.Items[0].Memory.ID)
}

func TestMemoriesBatchRefusesBadBodiesWhole(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	count := func() int { return ownerCount(t, s, `SELECT count(*) FROM memories`) }

	r := s.Do("POST", "/v1/memories/batch", key, map[string]any{"memories": []map[string]any{
		{"text": "fine", "user_id": "u1"}, {"text": "bad scope", "user_id": "not a valid id"}}})
	require.Equal(t, 422, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "body.memories[1].user_id")
	require.Zero(t, count())

	r = s.Do("POST", "/v1/memories/batch", key, map[string]any{"memories": []map[string]any{{"text": "nul \u0000 here"}}})
	require.Equal(t, 422, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "body.memories[0].text")
	require.Zero(t, count())

	many := make([]map[string]any, 1001)
	for i := range many {
		many[i] = map[string]any{"text": fmt.Sprintf("memory %d", i)}
	}
	r = s.Do("POST", "/v1/memories/batch", key, map[string]any{"memories": many})
	require.Equal(t, 422, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "body.memories")
	require.Zero(t, count())

	r = s.Do("POST", "/v1/memories/batch", key, map[string]any{"memories": []any{}})
	require.Equal(t, 422, r.Status, string(r.Body))

	// Larger than STRATA_MAX_BODY_BYTES (1 MiB) is fine for a batch (up to 16 MiB); the
	// single-memory route keeps the server's limit.
	long := make([]map[string]any, 150)
	for i := range long {
		var b strings.Builder
		for j := range 1100 { // distinct words: no two items are near duplicates
			fmt.Fprintf(&b, "w%dx%d ", i, j)
		}
		long[i] = map[string]any{"text": b.String()}
	}
	longBody, err := json.Marshal(map[string]any{"memories": long})
	require.NoError(t, err)
	require.Greater(t, len(longBody), 1<<20, "the batch is over 1 MiB")
	r = s.Do("POST", "/v1/memories/batch", key, longBody)
	require.Equal(t, 200, r.Status, string(r.Body))
	var lo batchResp
	r.JSON(t, &lo)
	require.Equal(t, 150, lo.Created+lo.Deduplicated)
	require.Equal(t, lo.Created, count())
	r = s.Do("POST", "/v1/memories", key, map[string]any{"text": "x", "metadata": map[string]any{"pad": strings.Repeat("y", 1<<20)}})
	require.Equal(t, 413, r.Status)

	// Agents may write batches; a compliance key may not.
	r = s.Do("POST", "/v1/memories/batch", s.NewKey("acme", "compliance"), map[string]any{"memories": []map[string]any{{"text": "x"}}})
	require.Equal(t, 403, r.Status)
}
