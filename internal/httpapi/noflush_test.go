package httpapi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// Reads (search, similar jobs, /v1/context) commit their bookkeeping with synchronous_commit
// off for their own transaction; writes, and reads with STRATA_SYNC_READ_COMMITS, wait for
// the flush. A trigger on audit_log records the setting each audit row was written under
// (the reads' set_config runs first in the COMMIT's round trip, so the trailer sees it).
func TestReadsCommitWithoutFlush(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		s := apptest.Start(t, apptest.Env("STRATA_SYNC_READ_COMMITS", map[bool]string{false: "false", true: "true"}[sync]))
		owner := testenv.OwnerConn(t, s.DBURL)
		ctx := context.Background()
		_, err := owner.Exec(ctx, `CREATE TABLE sync_seen (action text, setting text);
			CREATE FUNCTION note_sync() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
			BEGIN INSERT INTO sync_seen VALUES (NEW.action, current_setting('synchronous_commit')); RETURN NEW; END $$;
			CREATE TRIGGER note_sync AFTER INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION note_sync();`)
		require.NoError(t, err)
		key := s.NewKey("acme", "agent")
		create(t, s, key, map[string]any{"text": "the grade uses the warm LUT", "user_id": "u1"})
		require.NotEmpty(t, search(t, s, key, map[string]any{"query": "which LUT", "user_id": "u1"}).Items)
		r := s.Do("POST", "/v1/context", key, map[string]any{"query": "which LUT", "user_id": "u1"})
		require.Equal(t, 200, r.Status, string(r.Body))

		seen := map[string]string{}
		rows, err := owner.Query(ctx, `SELECT action, setting FROM sync_seen`)
		require.NoError(t, err)
		for rows.Next() {
			var a, v string
			require.NoError(t, rows.Scan(&a, &v))
			seen[a] = v
		}
		require.NoError(t, rows.Err())
		read := "off"
		if sync {
			read = "on"
		}
		require.Equal(t, "on", seen["create-memory"], "a write waits for the flush: %v", seen)
		require.Equal(t, "on", seen["create-key"], "a write waits for the flush: %v", seen)
		require.Equal(t, read, seen["search-memories"], "sync=%v: %v", sync, seen)
		require.Equal(t, read, seen["get-context"], "sync=%v: %v", sync, seen)
	}
}
