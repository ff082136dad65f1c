package mem0_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// TestMemoryWriteAuditInTrip: a memory write without an Idempotency-Key commits in its own
// round trip with its audit record in its statement (the status decided there); with a key
// it takes the unit of work's path (audit record and idempotency record with COMMIT). Both
// records must be the same but for the request id: actor, role, agent, action, entity,
// pseudonymised subject (from the body, or from the query when it names user_id there, as
// finishWrite reads it), status (201 new, 200 duplicate) and details (via mem0 included).
// Each write leaves exactly one record.
func TestMemoryWriteAuditInTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t, apptest.Env("STRATA_RATE_LIMIT", "0"))
	key := s.NewKey("tripaudit", "agent")
	c := testenv.OwnerConn(t, s.DBURL)

	type rec struct {
		Actor, Role, Agent, Action, Type, Entity, Subject, Details string
		Status                                                     int
	}
	record := func(rid string) rec {
		t.Helper()
		var r rec
		var n int
		require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE request_id = $1`, rid).Scan(&n))
		require.Equal(t, 1, n, "audit records of %s", rid)
		require.NoError(t, c.QueryRow(ctx, `SELECT actor_key_id, actor_role, coalesce(agent_id, ''), action, entity_type,
			coalesce(entity_id, ''), coalesce(subject, ''), details::text, coalesce(status, 0)
			FROM audit_log WHERE request_id = $1`, rid).
			Scan(&r.Actor, &r.Role, &r.Agent, &r.Action, &r.Type, &r.Entity, &r.Subject, &r.Details, &r.Status))
		return r
	}
	write := func(path string, body map[string]any, idem bool, status int) rec {
		t.Helper()
		rid := "ta-" + testenv.RandomID(12)
		hdr := []string{"X-Request-Id", rid}
		if idem {
			hdr = append(hdr, "Idempotency-Key", testenv.RandomID(16))
		}
		r := s.Do("POST", path, key, body, hdr...)
		require.Equal(t, status, r.Status, "%s", r.Body)
		return record(rid)
	}
	for _, c := range []struct {
		name, path string
		body       func(text string) map[string]any
		status     int // of the first write; its duplicate answers 200
	}{
		{name: "user", path: "/v1/memories", status: 201, body: func(text string) map[string]any {
			return map[string]any{"text": text, "user_id": "u-1"}
		}},
		{name: "agent", path: "/v1/memories", status: 201, body: func(text string) map[string]any {
			return map[string]any{"text": text, "agent_id": "a-1", "session_id": "s-1"}
		}},
		{name: "query user", path: "/v1/memories?user_id=u-2", status: 201, body: func(text string) map[string]any {
			return map[string]any{"text": text, "user_id": "u-3"}
		}},
		{name: "mem0", path: "/mem0/v1/memories/", status: 200, body: func(text string) map[string]any {
			return map[string]any{"messages": []map[string]any{{"role": "user", "content": text}}, "user_id": "u-4", "infer": false}
		}},
	} {
		// Two texts no near-duplicate check confuses.
		text := testenv.RandomID(10) + " " + testenv.RandomID(10) + " " + testenv.RandomID(10)
		other := testenv.RandomID(10) + " " + testenv.RandomID(10) + " " + testenv.RandomID(10)
		trip := write(c.path, c.body(text), false, c.status)
		unit := write(c.path, c.body(other), true, c.status)
		require.Equal(t, unit, trip, "%s: the record of a write in one trip and of one through the unit of work", c.name)
		require.Equal(t, 201, trip.Status, c.name)
		require.Equal(t, "create-memory", trip.Action, c.name)
		if c.name == "agent" { // no data subject named
			require.Empty(t, trip.Subject)
			require.Equal(t, "a-1", trip.Agent)
		} else {
			require.NotEmpty(t, trip.Subject, c.name)
		}
		if c.name == "mem0" {
			require.Contains(t, trip.Details, `"via": "mem0"`)
		}
		// The duplicate: answered 200, recorded 200, on both paths.
		dupTrip := write(c.path, c.body(text), false, 200)
		dupUnit := write(c.path, c.body(other), true, 200)
		require.Equal(t, dupUnit, dupTrip, "%s: duplicate", c.name)
		require.Equal(t, 200, dupTrip.Status, c.name)
	}
}
