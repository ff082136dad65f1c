package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/apptest"
)

// TestClientGraph drives every graph method against a real server.
func TestClientGraph(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	c := client.New(s.URL, s.NewKey("acme", "agent"))
	admin := client.New(s.URL, s.NewKey("acme", "admin"))
	u1 := client.Scope{UserID: "u1"}

	ana, err := c.ResolveEntity(ctx, client.EntityInput{Name: "Ana Silva", Aliases: []string{"Ana"}, Type: "person", Scope: u1})
	require.NoError(t, err)
	require.True(t, ana.Created)
	again, err := c.ResolveEntity(ctx, client.EntityInput{Name: "ana", Scope: u1})
	require.NoError(t, err)
	require.Equal(t, ana.ID, again.ID)
	require.False(t, again.Created)
	lisbon, err := c.ResolveEntity(ctx, client.EntityInput{Name: "Lisbon store", Scope: u1})
	require.NoError(t, err)
	porto, err := c.ResolveEntity(ctx, client.EntityInput{Name: "Porto store", Scope: u1})
	require.NoError(t, err)

	t0 := time.Now().UTC().Add(-time.Hour)
	first, err := c.AddRelation(ctx, client.RelationInput{SubjectID: ana.ID, Predicate: "works at", ObjectID: lisbon.ID,
		Functional: true, ValidFrom: &t0, Scope: u1})
	require.NoError(t, err)
	require.True(t, first.Created)
	require.Equal(t, "works_at", first.Relation.Predicate)
	second, err := c.AddRelation(ctx, client.RelationInput{SubjectID: ana.ID, Predicate: "works_at", ObjectID: porto.ID,
		Functional: true, Scope: u1})
	require.NoError(t, err)
	require.Equal(t, []string{first.Relation.ID}, second.Closed)

	hits, err := c.SearchEntities(ctx, "Ana", u1, 5)
	require.NoError(t, err)
	require.Equal(t, ana.ID, hits[0].Entity.ID)
	require.True(t, hits[0].Exact)

	now, err := c.AboutEntity(ctx, ana.ID, client.AsOf{})
	require.NoError(t, err)
	require.Len(t, now.Relations, 1)
	require.Equal(t, porto.ID, *now.Relations[0].ObjectID)
	then := t0.Add(time.Minute)
	before, err := c.AboutEntity(ctx, ana.ID, client.AsOf{World: &then})
	require.NoError(t, err)
	require.Len(t, before.Relations, 1)
	require.Equal(t, lisbon.ID, *before.Relations[0].ObjectID)

	ns, err := c.Neighbors(ctx, ana.ID, 2, client.AsOf{})
	require.NoError(t, err)
	require.Len(t, ns, 1)
	require.Equal(t, porto.ID, ns[0].Entity.ID)

	h, err := c.EntityHistory(ctx, ana.ID, "works_at", "", 1)
	require.NoError(t, err)
	require.Len(t, h.Items, 1)
	require.NotEmpty(t, h.NextCursor)
	h2, err := c.EntityHistory(ctx, ana.ID, "works_at", h.NextCursor, 1)
	require.NoError(t, err)
	require.Len(t, h2.Items, 1)

	dup, err := c.ResolveEntity(ctx, client.EntityInput{Name: "A. Silva", Scope: u1})
	require.NoError(t, err)
	_, err = c.MergeEntity(ctx, dup.ID, ana.ID)
	require.Error(t, err, "agents may not merge")
	m, err := admin.MergeEntity(ctx, dup.ID, ana.ID)
	require.NoError(t, err)
	require.Contains(t, m.Survivor.Aliases, "A. Silva")
	sp, err := admin.SplitEntity(ctx, ana.ID, client.SplitInput{Name: "A. Silva (other)", Aliases: []string{"A. Silva"}})
	require.NoError(t, err)
	require.NotEqual(t, ana.ID, sp.New.ID)

	del, err := c.DeleteEntity(ctx, porto.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, del.Entities)
	_, err = c.AboutEntity(ctx, porto.ID, client.AsOf{})
	require.Error(t, err)

	tc, err := c.Context(ctx, client.ContextRequest{Scope: u1, Query: "How is Ana doing?"})
	require.NoError(t, err)
	for _, sec := range tc.Sections {
		if sec.Name == "graph" {
			require.Equal(t, []string{ana.ID}, sec.Included)
			require.Equal(t, []string{"mentioned: 'Ana'"}, sec.Why)
		}
	}
}
