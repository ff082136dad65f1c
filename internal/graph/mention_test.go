package graph

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/strata"
)

func TestMentionForms(t *testing.T) {
	t.Parallel()
	f := MentionForms("Did Ana's team visit the Lisbon  Store, or A. Silva?")
	for _, want := range []string{"ana", "ana's", "lisbon store", "a. silva", "lisbon", "did ana's team visit the"} {
		require.Contains(t, f, want)
	}
	require.NotContains(t, f, "store,")
	require.NotContains(t, f, "silva?")
	require.Empty(t, MentionForms("  "))
	require.LessOrEqual(t, len(MentionForms(string(make([]byte, 0))+longText(5000))), maxMentionForms)
}

func longText(n int) string {
	b := make([]byte, 0, 2*n)
	for i := 0; i < n; i++ {
		b = append(b, 'a'+byte(i%26), ' ')
	}
	return string(b)
}

// TestMentions: the entities a text names by name or alias, visible from the scope, longest
// form first, hidden subjects left out; QueueAnyEntity tells an org with entities from one
// without.
func TestMentions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u1 := strata.Scope{OrgID: "acme", UserID: "u1"}
	ana := e.resolve(t, ResolveInput{Scope: u1, Name: "Ana Silva", Aliases: []string{"Ana"}})
	store := e.resolve(t, ResolveInput{Scope: strata.Scope{OrgID: "acme"}, Name: "Lisbon store"})
	bob := e.resolve(t, ResolveInput{Scope: strata.Scope{OrgID: "acme", UserID: "u2"}, Name: "Bob"})
	mentions := func(sc strata.Scope, text string, hide ...string) map[string]string {
		out := map[string]string{}
		require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx) error {
			ms, err := e.s.Mentions(ctx, tx, "acme", MentionQuery{Text: text, Scope: sc, Hide: hide})
			for _, m := range ms {
				out[m.Entity.Name] = m.Form
			}
			return err
		}))
		return out
	}
	require.Equal(t, map[string]string{"Ana Silva": "ana silva", "Lisbon store": "lisbon store"},
		mentions(u1, "Did Ana Silva and Bob open the Lisbon Store?"))
	require.Equal(t, map[string]string{"Ana Silva": "ana"}, mentions(u1, "how is ana's week"))
	require.Equal(t, map[string]string{"Lisbon store": "lisbon store"}, mentions(u1, "Ana at the lisbon store", "u1"))
	require.Empty(t, mentions(u1, "nobody here"))

	// InForce: each entity's relations in force written in a scope the reader sees.
	u2 := strata.Scope{OrgID: "acme", UserID: "u2"}
	add := func(sc strata.Scope, subject Entity, pred string, object Entity, functional bool) {
		require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx) error {
			_, err := e.s.AddRelation(ctx, tx, RelationInput{Scope: sc, SubjectID: subject.ID, Predicate: pred,
				ObjectID: &object.ID, Functional: functional})
			return err
		}))
	}
	add(u1, ana, "works_at", store, true)
	e.clk.Advance(time.Hour)
	other := e.resolve(t, ResolveInput{Scope: strata.Scope{OrgID: "acme"}, Name: "Porto store"})
	add(u1, ana, "works_at", other, true) // closes the first
	add(u2, bob, "visited", store, false)
	inForce := func(sc strata.Scope, ids ...uuid.UUID) map[uuid.UUID][]Relation {
		var out map[uuid.UUID][]Relation
		require.NoError(t, e.tx(t, "acme", func(ctx context.Context, tx pgx.Tx) error {
			var err error
			out, err = e.s.InForce(ctx, tx, "acme", InForceQuery{IDs: ids, Scope: &sc})
			return err
		}))
		return out
	}
	got := inForce(u1, ana.ID, store.ID)
	require.Len(t, got[ana.ID], 1)
	require.Equal(t, other.ID, *got[ana.ID][0].ObjectID, "only the relation in force")
	require.Empty(t, got[store.ID], "Ana no longer works there; Bob's visit is u2's")
	got = inForce(u2, store.ID)
	require.Len(t, got[store.ID], 1)
	require.Equal(t, "visited", got[store.ID][0].Predicate)

	anyIn := func(org string) bool {
		var found bool
		var ferr error
		require.NoError(t, e.tx(t, org, func(ctx context.Context, tx pgx.Tx) error {
			b := &pgx.Batch{}
			QueueAnyEntity(b, org, &found, &ferr)
			return tx.SendBatch(ctx, b).Close()
		}))
		require.NoError(t, ferr)
		return found
	}
	require.True(t, anyIn("acme"))
	require.False(t, anyIn("empty-org"))
}
