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

// quarantine inserts an active row of memory_quarantines (the semantic tier's table, as its
// CreateQuarantine writes it) holding key's or agent's writes since since.
func (e *env) quarantine(t *testing.T, org, key, agent string, since time.Time) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	require.NoError(t, e.tx(t, org, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO memory_quarantines (org_id, id, key_id, agent_id, since, created_by, created_at)
			VALUES ($1, $2, $3, $4, $5, 'admin', $5)`, org, id, key, agent, since)
		return err
	}))
	return id
}

func (e *env) release(t *testing.T, org string, id uuid.UUID) {
	t.Helper()
	require.NoError(t, e.tx(t, org, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE memory_quarantines SET status = 'released' WHERE org_id = $1 AND id = $2`, org, id)
		return err
	}))
}

// TestQuarantineHidesRelations: relations a quarantined key or agent wrote since the
// quarantine's time are left out of About, History, Neighbors and InForce while it is
// active; earlier ones, and everything after a release, are shown.
func TestQuarantineHidesRelations(t *testing.T) {
	e := setup(t)
	sc := strata.Scope{OrgID: "org1", UserID: "u1"}
	ana, acme, bob, lisbon := e.entity(t, sc, "Ana"), e.entity(t, sc, "Acme"), e.entity(t, sc, "Bob"), e.entity(t, sc, "Lisbon")

	old := link(sc, ana, "lives_in", lisbon, false)
	old.Provenance = Provenance{KeyID: "k-bad"}
	e.add(t, old) // recorded at t0, before the quarantine's since
	e.clk.Advance(time.Hour)
	bad := link(sc, ana, "works_at", acme, false)
	bad.Provenance = Provenance{KeyID: "k-bad"}
	e.add(t, bad)
	byAgent := link(sc, ana, "knows", bob, false)
	byAgent.Provenance = Provenance{KeyID: "k-good", AgentID: "agent-x"}
	e.add(t, byAgent)

	read := func() (about, history []string, neighbors []string, inForce int) {
		require.NoError(t, e.tx(t, "org1", func(ctx context.Context, tx pgx.Tx) error {
			a, err := e.s.About(ctx, tx, "org1", AboutQuery{ID: ana.ID})
			require.NoError(t, err)
			about = objects(a)
			h, err := e.s.History(ctx, tx, "org1", HistoryQuery{EntityID: ana.ID})
			require.NoError(t, err)
			for _, r := range h {
				history = append(history, r.Predicate)
			}
			nb, err := e.s.Neighbors(ctx, tx, "org1", NeighborsQuery{ID: ana.ID, Depth: 2})
			require.NoError(t, err)
			for _, n := range nb {
				neighbors = append(neighbors, n.Entity.Name)
			}
			f, err := e.s.InForce(ctx, tx, "org1", InForceQuery{IDs: []uuid.UUID{ana.ID}})
			require.NoError(t, err)
			inForce = len(f[ana.ID])
			return nil
		}))
		return
	}

	a, h, n, f := read()
	require.Equal(t, []string{"knows:Bob", "lives_in:Lisbon", "works_at:Acme"}, a)
	require.Len(t, h, 3)
	require.ElementsMatch(t, []string{"Acme", "Bob", "Lisbon"}, n)
	require.Equal(t, 3, f)

	q := e.quarantine(t, "org1", "k-bad", "", t0.Add(30*time.Minute))
	qa := e.quarantine(t, "org1", "", "agent-x", t0)
	a, h, n, f = read()
	require.Equal(t, []string{"lives_in:Lisbon"}, a, "before since stays visible")
	require.Equal(t, []string{"lives_in"}, h)
	require.Equal(t, []string{"Lisbon"}, n)
	require.Equal(t, 1, f)
	// As of an earlier record time the quarantined relation is hidden too.
	require.Equal(t, []string{"lives_in:Lisbon"}, objects(e.about(t, "org1", ana.ID, AsOf{World: at(2 * time.Hour)})))
	// Another org's quarantine hides nothing here.
	e.quarantine(t, "org2", "k-good", "", t0)

	e.release(t, "org1", q)
	e.release(t, "org1", qa)
	a, h, n, f = read()
	require.Equal(t, []string{"knows:Bob", "lives_in:Lisbon", "works_at:Acme"}, a)
	require.Len(t, h, 3)
	require.ElementsMatch(t, []string{"Acme", "Bob", "Lisbon"}, n)
	require.Equal(t, 3, f)
}
