package httpapi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

type auditReport struct {
	OK          bool  `json:"ok"`
	Checked     int64 `json:"checked"`
	FirstBroken *struct {
		Seq    int64  `json:"seq"`
		Reason string `json:"reason"`
	} `json:"first_broken"`
}

func TestAuditLogRecordsWritesAndDetectsTampering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	admin := s.NewKey("acme", "admin")
	compliance := s.NewKey("acme", "compliance")
	agent := s.NewKey("acme", "agent")
	for i := 0; i < 5; i++ {
		r := s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "agent", "name": "bot", "user_id": "alice-42"})
		require.Equal(t, 422, r.Status, "user_id is not a key field: rejected and not audited")
		require.Equal(t, 201, s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "agent", "name": "secret-name-xyz"}).Status)
	}

	// Agents may not read the audit log.
	require.Equal(t, 403, s.Do("GET", "/v1/audit", agent, nil).Status)

	r := s.Do("GET", "/v1/audit?action=create-key", compliance, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var list struct {
		Items []map[string]any `json:"items"`
	}
	r.JSON(t, &list)
	require.Len(t, list.Items, 5)
	for _, it := range list.Items {
		require.Equal(t, "admin.keys", it["entity_type"])
		require.NotEmpty(t, it["request_id"])
		require.NotEmpty(t, it["actor_key_id"])
	}
	require.NotContains(t, string(r.Body), "secret-name-xyz", "the audit log keeps no bodies")

	r = s.Do("GET", "/v1/audit/verify", compliance, nil)
	require.Equal(t, 200, r.Status, string(r.Body))
	var rep auditReport
	r.JSON(t, &rep)
	require.True(t, rep.OK)
	require.EqualValues(t, 5, rep.Checked)

	owner := testenv.OwnerConn(t, s.DBURL)
	// The database refuses edits and deletes, even by the owner.
	_, err := owner.Exec(ctx, `UPDATE audit_log SET action = 'nothing' WHERE org_id = 'acme'`)
	require.ErrorContains(t, err, "append-only")
	_, err = owner.Exec(ctx, `DELETE FROM audit_log WHERE org_id = 'acme'`)
	require.ErrorContains(t, err, "append-only")

	// Someone with superuser powers edits a row by hand: verify names the link.
	_, err = owner.Exec(ctx, `ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only`)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `UPDATE audit_log SET actor_key_id = 'someone-else' WHERE org_id = 'acme' AND seq = 3`)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only`)
	require.NoError(t, err)
	r = s.Do("GET", "/v1/audit/verify", compliance, nil)
	r.JSON(t, &rep)
	require.False(t, rep.OK)
	require.NotNil(t, rep.FirstBroken)
	require.EqualValues(t, 3, rep.FirstBroken.Seq)
	require.Contains(t, rep.FirstBroken.Reason, "edited")
}

func TestAuditRemovedRecordIsDetected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t)
	admin := s.NewKey("acme", "admin")
	for i := 0; i < 4; i++ {
		require.Equal(t, 201, s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "agent"}).Status)
	}
	var rep auditReport
	s.Do("GET", "/v1/audit/verify", admin, nil).JSON(t, &rep)
	require.True(t, rep.OK)

	owner := testenv.OwnerConn(t, s.DBURL)
	_, err := owner.Exec(ctx, `BEGIN; SET LOCAL session_replication_role = replica; DELETE FROM audit_log WHERE org_id = 'acme' AND seq = 2; COMMIT`)
	require.NoError(t, err)
	s.Do("GET", "/v1/audit/verify", admin, nil).JSON(t, &rep)
	require.False(t, rep.OK)
	require.EqualValues(t, 2, rep.FirstBroken.Seq)
	require.Contains(t, rep.FirstBroken.Reason, "missing")
}

// TestAuditNewestFirstAndVia: order=newest pages from the newest record towards older ones
// with no gap or repeat; every record says which channel it came through (MCP and the Mem0
// API are named, the API itself is not).
func TestAuditNewestFirstAndVia(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	compliance, agent := s.NewKey("audit-order", "compliance"), s.NewKey("audit-order", "agent")
	for i := range 5 {
		require.Equal(t, 201, s.Do("POST", "/v1/memories", agent, map[string]any{"text": fmt.Sprintf("note %d", i)}).Status)
	}
	r := s.Do("POST", "/mem0/v1/memories/", agent, map[string]any{"messages": "a mem0 note", "user_id": "u1", "infer": false})
	require.Equal(t, 200, r.Status, string(r.Body))
	type rec struct {
		ID      int64          `json:"id"`
		Action  string         `json:"action"`
		Details map[string]any `json:"details"`
	}
	var oldest struct{ Items []rec }
	s.Do("GET", "/v1/audit?action=create-memory", compliance, nil).JSON(t, &oldest)
	require.Len(t, oldest.Items, 6)
	var got []rec
	cursor := ""
	for {
		var page struct {
			Items      []rec
			NextCursor string `json:"next_cursor"`
		}
		r := s.Do("GET", "/v1/audit?action=create-memory&order=newest&limit=4"+cursor, compliance, nil)
		require.Equal(t, 200, r.Status, string(r.Body))
		r.JSON(t, &page)
		got = append(got, page.Items...)
		if page.NextCursor == "" {
			break
		}
		cursor = "&cursor=" + page.NextCursor
	}
	require.Len(t, got, 6)
	for i := range got {
		require.Equal(t, oldest.Items[len(got)-1-i].ID, got[i].ID)
	}
	require.Equal(t, "mem0", got[0].Details["via"], "the newest came through the Mem0 API")
	require.Nil(t, got[1].Details["via"], "the API itself is not named")
	require.Equal(t, 422, s.Do("GET", "/v1/audit?order=sideways", compliance, nil).Status)
}
