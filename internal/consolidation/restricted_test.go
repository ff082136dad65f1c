package consolidation_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/consolidation"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
)

// restrictedUser is a Consolidator.Restricted that holds one subject.
func restrictedUser(user string) func(context.Context, pg.DBTX, string, string) (bool, error) {
	return func(_ context.Context, _ pg.DBTX, _, u string) (bool, error) { return u == user, nil }
}

// TestSummarizeJobDeferredWhileRestricted (issue 57, item 3): the River worker's path for a
// job whose subject is restricted calls no model and writes no memory; it answers
// ErrDeferred (the worker snoozes the job) and summarises once the restriction is lifted.
func TestSummarizeJobDeferredWhileRestricted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv, reqs := chatServer(t, "Graded the teaser.", false)
	llm, err := consolidation.NewLLM(consolidation.LLMOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Model: "summary-model"})
	require.NoError(t, err)
	e.c.Summarizer = llm
	e.c.Restricted = restrictedUser("ana")
	e.mediaJob("job-ana", "ana")
	res, err := e.c.SummarizeJob(e.ctx, org, "job-ana")
	require.True(t, errors.Is(err, consolidation.ErrDeferred), "%v", err)
	require.Equal(t, "restricted", res.Status)
	require.Empty(t, *reqs, "no model call")
	require.Empty(t, e.jobMemories(), "no memory")

	e.c.Restricted = restrictedUser("")
	res, err = e.c.SummarizeJob(e.ctx, org, "job-ana")
	require.NoError(t, err)
	require.Equal(t, "written", res.Status)
	require.Len(t, e.jobMemories(), 1)
}

// TestMergeSkipsRestrictedSubject (issue 57, item 3): near-duplicates of a restricted
// subject are not merged (no new version while restricted); another subject's are.
func TestMergeSkipsRestrictedSubject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.c.Restricted = restrictedUser("u1")
	u1, u2 := strata.Scope{UserID: "u1"}, strata.Scope{UserID: "u2"}
	a := e.insert("The user prefers dark mode in the editor.", u1, semantic.Provenance{KeyID: "k1"}, false, 0.4)
	b := e.insert("The user prefers dark mode in the editor", u1, semantic.Provenance{KeyID: "k2"}, false, 0.8)
	e.insert("The user prefers dark mode in the editor.", u2, semantic.Provenance{KeyID: "k1"}, false, 0.4)
	e.insert("The user prefers dark mode in the editor", u2, semantic.Provenance{KeyID: "k2"}, false, 0.8)
	e.clock.Advance(time.Minute)

	rep := e.run(consolidation.TaskMerge)
	require.Equal(t, 1, rep.Merge.Clusters, "only u2's cluster: %+v", rep.Merge)
	require.Nil(t, e.get(a.ID).ValidTo, "the restricted subject's memories are left as they are")
	require.Nil(t, e.get(b.ID).ValidTo)
	require.Equal(t, 1, e.get(b.ID).Version)
}
