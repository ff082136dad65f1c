package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

// TestClientBrowseAndSummaries: ListMemories pages newest first with filters, ListSessions
// lists a user's sessions, and the summary reads answer what the background job wrote.
func TestClientBrowseAndSummaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t, apptest.NoAutoConsolidation(), apptest.Env("STRATA_TURN_BUFFER", "3"),
		apptest.Env("STRATA_SUMMARY_EVERY", "2"), apptest.Env("STRATA_SUMMARY_POLL", "100ms"))
	c := client.New(s.URL, s.NewKey("acme", "agent"))
	for i := 0; i < 3; i++ {
		_, err := c.Remember(ctx, client.NewMemory{Text: fmt.Sprintf("u1 fact %d about reels", i), Scope: client.Scope{UserID: "u1"}})
		require.NoError(t, err)
	}
	p, err := c.ListMemories(ctx, client.MemoryFilter{Scope: client.Scope{UserID: "u1"}}, "", 2)
	require.NoError(t, err)
	require.Len(t, p.Items, 2)
	require.Equal(t, "u1 fact 2 about reels", p.Items[0].Text)
	p, err = c.ListMemories(ctx, client.MemoryFilter{Scope: client.Scope{UserID: "u1"}}, p.NextCursor, 2)
	require.NoError(t, err)
	require.Len(t, p.Items, 1)
	require.Empty(t, p.NextCursor)
	p, err = c.ListMemories(ctx, client.MemoryFilter{Provenance: "extracted"}, "", 0)
	require.NoError(t, err)
	require.Empty(t, p.Items)

	for i := 0; i < 6; i++ {
		_, err := c.AddMessage(ctx, "s1", "user", fmt.Sprintf("Export reel %d in 4K.", i), client.SessionWrite{UserID: "u1"})
		require.NoError(t, err)
	}
	ss, err := c.ListSessions(ctx, "u1", "", 0)
	require.NoError(t, err)
	require.Len(t, ss.Items, 1)
	require.EqualValues(t, 6, ss.Items[0].Turns)
	var sum client.Summary
	require.Eventually(t, func() bool {
		sum, err = c.SessionSummary(ctx, "s1")
		return err == nil && sum.ToSeq == 3
	}, 30*time.Second, 50*time.Millisecond, "%v", err)
	require.Equal(t, "extractive", sum.Summarizer)
	require.Contains(t, sum.Text, "4K")
	vs, err := c.SummaryVersions(ctx, "session", "s1", "", 0)
	require.NoError(t, err)
	require.Len(t, vs.Items, 1)
	_, err = c.JobSummary(ctx, "no-such-job")
	require.True(t, client.IsNotFound(err), "%v", err)
}
