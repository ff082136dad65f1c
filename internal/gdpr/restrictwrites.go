package gdpr

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Targets is the stored data a write acts on (see api.Targets): users named directly, and
// records by id whose subject is looked up.
type Targets struct {
	Users, Jobs, Sessions, Memories, Assets, Entities []string
	KV                                                []KVEntry
}

// KVEntry is one key-value entry at one scope.
type KVEntry struct{ Namespace, Key, Level, ScopeID string }

// refuseTargetsSQL answers whether any subject of the targets is restricted, in one
// statement: the users named, and the owners of the job, session, memory, asset, graph
// entity and key-value entry ids (ids that match nothing name nobody).
const refuseTargetsSQL = `SELECT EXISTS (SELECT 1 FROM gdpr_restrictions r WHERE r.org_id = $1 AND r.user_id IN (
	SELECT u FROM unnest($2::text[]) u
	UNION ALL SELECT user_id FROM jobs WHERE org_id = $1 AND job_id = ANY($3)
	UNION ALL SELECT user_id FROM working_sessions WHERE org_id = $1 AND session_id = ANY($4)
	UNION ALL SELECT user_id FROM memories WHERE org_id = $1 AND id = ANY($5::uuid[])
	UNION ALL SELECT user_id FROM assets WHERE org_id = $1 AND asset_id = ANY($6)
	UNION ALL SELECT user_id FROM graph_entities WHERE org_id = $1 AND id = ANY($7::uuid[])
	UNION ALL SELECT e.user_id FROM kv_entries e JOIN unnest($8::text[], $9::text[], $10::text[], $11::text[]) AS k(ns, key, level, scope_id)
		ON e.namespace = k.ns AND e.key = k.key AND e.level = k.level AND e.scope_id = k.scope_id
		WHERE e.org_id = $1))`

// RefuseTargets returns strata.ErrRestricted when a write acting on t would act on a
// restricted subject's data (Art. 18(2): stored, not otherwise processed). It runs before
// the write, so a refused write changes nothing (not Postgres, not Redis). Most orgs
// restrict nobody: the cached set answers without a round trip. sess is the request's unit
// of work: its transaction when it has begun, else one pooled round trip.
func (r *Restrictions) RefuseTargets(ctx context.Context, sess *pg.Session, org string, t Targets) error {
	none, err := r.cache.NoneIn(org, r.fill(ctx, sess, org))
	if err != nil || none {
		return err
	}
	var ns, keys, levels, scopes []string
	for _, e := range t.KV {
		ns, keys, levels, scopes = append(ns, e.Namespace), append(keys, e.Key), append(levels, e.Level), append(scopes, e.ScopeID)
	}
	rows, done, err := r.query(ctx, sess, org, refuseTargetsSQL, org, nonEmpty(t.Users), nonEmpty(t.Jobs), nonEmpty(t.Sessions), uuids(t.Memories),
		nonEmpty(t.Assets), uuids(t.Entities), ns, keys, levels, scopes)
	defer done()
	if err != nil {
		return err
	}
	restricted, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if err != nil {
		return pg.Interpret(err)
	}
	if restricted {
		return strata.ErrRestricted
	}
	return nil
}

func nonEmpty(ids []string) []string {
	out := []string{}
	for _, id := range ids {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

// uuids keeps the ids that are UUIDs (others name no record).
func uuids(ids []string) []string {
	out := []string{}
	for _, id := range ids {
		if _, err := uuid.Parse(id); err == nil {
			out = append(out, id)
		}
	}
	return out
}
