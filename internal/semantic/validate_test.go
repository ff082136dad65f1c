package semantic_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// requireField asserts err is a 422 FieldError on the bare field name.
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field)
	require.Equal(t, strata.FieldInvalid, fe.Kind)
}

// TestSearchRequestValidation: a search request is checked in the tier, naming each bad
// field bare (the transport adds body./query.).
func TestSearchRequestValidation(t *testing.T) {
	t.Parallel()
	sc := strata.Scope{OrgID: "o", UserID: "u"}
	space := semantic.Space{Embedder: "hash", Model: "m", Dims: 8}
	ok := func() semantic.SearchRequest { return semantic.SearchRequest{Scope: sc, Text: "brand colours"} }

	q, err := ok().Query(space)
	require.NoError(t, err)
	require.Equal(t, semantic.DefaultTopK, q.TopK)
	require.Equal(t, space, q.Space)
	require.Equal(t, sc, q.Scope)

	after, before := time.Now(), time.Now().Add(-time.Hour)
	for _, c := range []struct {
		field string
		mod   func(*semantic.SearchRequest)
	}{
		{"query", func(r *semantic.SearchRequest) { r.Text = "  \n" }},
		{"query", func(r *semantic.SearchRequest) { r.Text = "a\x00b" }},
		{"top_k", func(r *semantic.SearchRequest) { r.TopK = semantic.MaxTopK + 1 }},
		{"kinds[1]", func(r *semantic.SearchRequest) { r.Kinds = []string{"fact", "bad kind"} }},
		{"trust[0]", func(r *semantic.SearchRequest) { r.Trust = []string{"rumour"} }},
		{"metadata", func(r *semantic.SearchRequest) {
			r.Metadata = map[string]any{"big": strings.Repeat("x", semantic.MaxMetadataBytes)}
		}},
		{"stale_after", func(r *semantic.SearchRequest) { r.StaleAfter = "-1h" }},
		{"stale_after", func(r *semantic.SearchRequest) { r.StaleAfter = "soon" }},
		{"created_before", func(r *semantic.SearchRequest) { r.CreatedAfter, r.CreatedBefore = &after, &before }},
		{"provenance.agent_ids[0]", func(r *semantic.SearchRequest) {
			r.Provenance = &semantic.ProvenanceFilter{AgentIDs: []string{"no spaces"}}
		}},
		{"provenance.exclude_key_ids[1]", func(r *semantic.SearchRequest) {
			r.Provenance = &semantic.ProvenanceFilter{ExcludeKeyIDs: []string{"k1", ""}}
		}},
	} {
		r := ok()
		c.mod(&r)
		_, err := r.Query(space)
		requireField(t, err, c.field)
	}

	r := ok()
	r.StaleAfter, r.Provenance = "720h", &semantic.ProvenanceFilter{KeyIDs: []string{"k1"}}
	q, err = r.Query(space)
	require.NoError(t, err)
	require.Equal(t, 720*time.Hour, q.StaleAfter)
	require.Equal(t, []string{"k1"}, q.Provenance.KeyIDs)

	r = ok()
	r.IncludeQuarantined = true
	_, err = r.Query(space)
	require.ErrorIs(t, err, semantic.ErrIncludeQuarantined)
	require.ErrorIs(t, err, strata.ErrForbidden)
	r.Admin = true
	q, err = r.Query(space)
	require.NoError(t, err)
	require.True(t, q.IncludeQuarantined)
}

// TestSimilarJobsRequestAndMapping: similar-jobs searches job memories (default 5) with the
// search's trust and provenance checks, and reads each job memory's metadata.
func TestSimilarJobsRequestAndMapping(t *testing.T) {
	t.Parallel()
	sc := strata.Scope{OrgID: "o"}
	q, err := semantic.SimilarJobsRequest{Scope: sc, Text: "render a trailer"}.Query(semantic.Space{})
	require.NoError(t, err)
	require.Equal(t, []string{semantic.KindJob}, q.Kinds)
	require.Equal(t, semantic.DefaultSimilarJobs, q.TopK)

	_, err = semantic.SimilarJobsRequest{Scope: sc, Text: ""}.Query(semantic.Space{})
	requireField(t, err, "query")
	_, err = semantic.SimilarJobsRequest{Scope: sc, Text: "x", Trust: []string{"verified", "nope"}}.Query(semantic.Space{})
	requireField(t, err, "trust[1]")
	_, err = semantic.SimilarJobsRequest{Scope: sc, Text: "x",
		Provenance: &semantic.ProvenanceFilter{JobIDs: []string{"bad id"}}}.Query(semantic.Space{})
	requireField(t, err, "provenance.job_ids[0]")

	id := uuid.Must(uuid.NewV7())
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	jobs := semantic.SimilarJobs([]semantic.Result{{Memory: semantic.Memory{ID: id, Text: "rendered", ValidFrom: at,
		Metadata: map[string]any{"job_id": "j1", "outcome": "ok", "parameters": map[string]any{"fps": 24}}}}})
	require.Equal(t, []semantic.SimilarJob{{MemoryID: id, JobID: "j1", Outcome: "ok",
		Parameters: map[string]any{"fps": 24}, Summary: "rendered", At: at}}, jobs)
}

// TestMemoryFieldChecks: text, metadata, ids and quarantine requests name bare fields.
func TestMemoryFieldChecks(t *testing.T) {
	t.Parallel()
	require.NoError(t, semantic.CheckText("text", "fine"))
	requireField(t, semantic.CheckText("text", " "), "text")
	requireField(t, semantic.CheckText("memory.text", "a\x00"), "memory.text")
	require.NoError(t, semantic.CheckMetadata("metadata", nil))
	requireField(t, semantic.CheckMetadata("metadata", map[string]any{"s": "a\x00b"}), "metadata")

	requireField(t, semantic.NewMemory{Text: ""}.Validate(), "text")
	requireField(t, semantic.NewMemory{Text: "ok", Metadata: map[string]any{"k": "\x00"}}.Validate(), "metadata")
	require.NoError(t, semantic.Patch{}.Validate())
	blank := "\t"
	requireField(t, semantic.Patch{Text: &blank}.Validate(), "text")

	_, err := semantic.ParseID("id", "not-a-uuid")
	requireField(t, err, "id")

	requireField(t, semantic.NewQuarantine{KeyID: "k"}.Validate(), "since")
	requireField(t, semantic.NewQuarantine{KeyID: "k", Since: time.Now(), Reason: "\x00"}.Validate(), "reason")
	require.NoError(t, semantic.NewQuarantine{KeyID: "k", Since: time.Now()}.Validate())
	require.False(t, errors.Is(semantic.NewQuarantine{KeyID: "k", Since: time.Now()}.Validate(), strata.ErrForbidden))

	// Page cursors are parsed by the tier before any query (so no connection is needed).
	st, ctx := semantic.NewStore(semantic.Options{}, nil), context.Background()
	_, err = st.ListQuarantines(ctx, nil, "o", "", "not-an-id", 10)
	requireField(t, err, "cursor")
	_, err = st.QuarantinedMemories(ctx, nil, "o", uuid.Must(uuid.NewV7()), "42", 10)
	requireField(t, err, "cursor")
	_, err = st.Retrievals(ctx, nil, "o", uuid.Must(uuid.NewV7()), "-1", 10)
	requireField(t, err, "cursor")
	_, err = st.Retrievals(ctx, nil, "o", uuid.Must(uuid.NewV7()), "x", 10)
	requireField(t, err, "cursor")
}
