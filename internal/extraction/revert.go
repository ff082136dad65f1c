package extraction

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// RevertQuarantined undoes the preferences that extraction batches written (in part) by
// keyID, or with agentID, at or after since wrote (issue 57 item 2 follow-up): key-value
// memory has no held state, so a quarantine made after a batch cannot hold them as it
// holds the batch's memories. Each preference a batch wrote whose current version is
// still the batch's is put back to its previous value, or deleted when the batch created
// it (a later write by anyone else is left alone). A release does not bring them back.
// Run it on the quarantine's transaction; actor is the key creating the quarantine. It
// answers how many preferences it reverted.
func (x *Extractor) RevertQuarantined(ctx context.Context, tx pgx.Tx, afterCommit AfterCommit, org, keyID, agentID string,
	since time.Time, actor string) (int, error) {
	if x.KV == nil {
		return 0, nil
	}
	type hit struct {
		key            string
		version        int64
		user, agent    *string
		session        *string
		prevValue      []byte
		prevWasDeleted bool
	}
	rows, err := tx.Query(ctx, `SELECT p.kv_key, p.kv_version, v.user_id, v.agent_id, v.session_id,
			pv.value, coalesce(pv.op = 'delete', true)
		FROM extraction_provenance p
		JOIN kv_versions v ON v.org_id = p.org_id AND v.namespace = p.kv_namespace AND v.key = p.kv_key
		  AND v.version = p.kv_version AND v.op <> 'delete'
		JOIN kv_entries e ON e.org_id = v.org_id AND e.namespace = v.namespace AND e.key = v.key
		  AND e.level = v.level AND e.scope_id = v.scope_id AND e.version = v.version AND NOT e.deleted
		LEFT JOIN kv_versions pv ON pv.org_id = v.org_id AND pv.namespace = v.namespace AND pv.key = v.key
		  AND pv.level = v.level AND pv.scope_id = v.scope_id AND pv.version = v.version - 1
		WHERE p.org_id = $1 AND p.kv_namespace = $2 AND p.kv_version IS NOT NULL AND p.created_at >= $3
		  AND (($4 <> '' AND (p.written_by = $4 OR $4 = ANY(p.writers))) OR ($5 <> '' AND p.agent_id = $5))
		ORDER BY p.created_at`, org, Namespace, since.UTC(), keyID, agentID)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	hits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hit, error) {
		var h hit
		err := r.Scan(&h.key, &h.version, &h.user, &h.agent, &h.session, &h.prevValue, &h.prevWasDeleted)
		return h, err
	})
	if err != nil {
		return 0, pg.Interpret(err)
	}
	n := 0
	for _, h := range hits {
		sc := strata.Scope{OrgID: org, UserID: deref(h.user), AgentID: deref(h.agent), SessionID: deref(h.session)}
		v := h.version
		if h.prevWasDeleted || h.prevValue == nil {
			_, err = x.KV.Delete(ctx, tx, afterCommit, Namespace, h.key, sc, &v, actor)
		} else {
			_, _, err = x.KV.Restore(ctx, tx, afterCommit, keyvalue.WriteInput{Namespace: Namespace,
				Key: h.key, Scope: sc, RestoreVersion: v - 1, IfMatch: &v, Actor: actor})
		}
		if errors.Is(err, strata.ErrNotFound) || errors.Is(err, strata.ErrConflict) {
			continue // changed since: a later write is not the batch's
		}
		if err != nil {
			return n, fmt.Errorf("extraction: reverting a quarantined batch's preference: %w", err)
		}
		n++
	}
	return n, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
