package gdpr_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestGDPRGraphExportedAndErased: the subject's entities and relations (and a relation of
// another scope that names the subject's entity) are in the export, erased in the graph
// phase with their counts on the receipt, and verified gone; another user's graph stays.
func TestGDPRGraphExportedAndErased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, dsn := newEngine(t, time.Now)
	const org, user, other = "org-graph", "u-graph", "u-keep"
	g := graph.NewStore(graph.Options{})
	var ana, store, bob graph.Entity
	require.NoError(t, pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) error {
		var err error
		mine := strata.Scope{OrgID: org, UserID: user}
		if ana, _, err = g.Resolve(ctx, tx, graph.ResolveInput{Scope: mine, Name: "Ana Silva", Aliases: []string{"Ana"}, Type: "person"}); err != nil {
			return err
		}
		if store, _, err = g.Resolve(ctx, tx, graph.ResolveInput{Scope: strata.Scope{OrgID: org}, Name: "Lisbon store", Type: "place"}); err != nil {
			return err
		}
		if _, err = g.AddRelation(ctx, tx, graph.RelationInput{Scope: mine, SubjectID: ana.ID, Predicate: "manages", ObjectID: &store.ID,
			Fact: "Ana manages the Lisbon store"}); err != nil {
			return err
		}
		theirs := strata.Scope{OrgID: org, UserID: other}
		if bob, _, err = g.Resolve(ctx, tx, graph.ResolveInput{Scope: theirs, Name: "Bob", Type: "person"}); err != nil {
			return err
		}
		_, err = g.AddRelation(ctx, tx, graph.RelationInput{Scope: theirs, SubjectID: bob.ID, Predicate: "works_at", ObjectID: &store.ID})
		return err
	}))

	// The export has the subject's entity and relation, and not the other user's.
	var buf bytes.Buffer
	require.NoError(t, pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) error {
		_, err := gdpr.Export(ctx, tx, e.Working, gdpr.ExportHeader{OrgID: org, UserID: user, Subject: e.Pseudo.Subject(org, user),
			GeneratedAt: time.Now()}, &buf)
		return err
	}))
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Tier, Type, ID string }
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec.Tier == "graph" {
			kinds = append(kinds, rec.Type+":"+rec.ID)
		}
	}
	require.Len(t, kinds, 2)
	require.Contains(t, kinds, "entity:"+ana.ID.String())
	require.Contains(t, buf.String(), "Ana manages the Lisbon store")
	require.NotContains(t, buf.String(), "Bob")

	var id string
	require.NoError(t, pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) error {
		er, err := gdpr.CreateErasure(ctx, tx, nil, gdpr.NewErasure{OrgID: org, UserID: user, Subject: e.Pseudo.Subject(org, user),
			RequestedBy: "key1", At: time.Now()})
		id = er.ID
		return err
	}))
	require.NoError(t, e.Run(ctx, org, id, "worker"))
	var er gdpr.Erasure
	require.NoError(t, pg.InOrgTx(ctx, e.Pool, org, func(tx pgx.Tx) (err error) {
		er, err = gdpr.GetErasure(ctx, tx, org, id)
		return err
	}))
	require.Equal(t, "completed", er.Status)
	require.Contains(t, er.PhasesDone, "graph")
	require.Equal(t, map[string]int64{"entities": 1, "relations": 1}, er.Counts["graph"])
	require.True(t, er.Verification.Clean, "%v", er.Verification.Remaining)
	require.Zero(t, er.Verification.Remaining["graph.graph_entities"])

	owner := testenv.OwnerConn(t, dsn)
	var left, kept int
	require.NoError(t, owner.QueryRow(ctx, `SELECT (SELECT count(*) FROM graph_entities WHERE org_id = $1 AND user_id = $2)
		+ (SELECT count(*) FROM graph_relations WHERE org_id = $1 AND user_id = $2)`, org, user).Scan(&left))
	require.Zero(t, left)
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM graph_relations WHERE org_id = $1 AND user_id = $2`, org, other).Scan(&kept))
	require.Equal(t, 1, kept, "the other user's relation stays")
}
