package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/testenv"
)

// resurrectRow is what Postgres holds of a session: its state as text ("" when NULL), user,
// version and whether it is a tombstone.
type resurrectRow struct {
	state, user string
	version     int64
	deleted     bool
}

func resurrectDurable(t *testing.T, owner *pgx.Conn, session string) resurrectRow {
	t.Helper()
	var r resurrectRow
	require.NoError(t, owner.QueryRow(context.Background(), `SELECT coalesce(state::text, ''), coalesce(user_id, ''),
		version, deleted_at IS NOT NULL FROM working_sessions WHERE session_id = $1`, session).
		Scan(&r.state, &r.user, &r.version, &r.deleted))
	return r
}

// TestWorkingResurrectAfterRollback: a session holding a subject's data is deleted (DELETE)
// or erased (GDPR erasure), and then Redis comes back with the copy from before (a failover
// to a replica that missed the delete, or a restored Redis backup). A write built on that
// copy — PUT or PATCH, with the If-Match the copy shows or without — must not be
// acknowledged on top of it: it is refused (409), or it creates a fresh session that holds
// nothing of the deleted one. Postgres must never hold the erased state or subject again,
// a stale ETag from before the delete never matches, and versions never go backwards.
func TestWorkingResurrectAfterRollback(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	owner := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)

	for _, kind := range []string{"delete", "erase", "legacy-delete", "legacy-erase"} {
		for _, method := range []string{"PUT", "PATCH"} {
			for _, ifMatch := range []bool{true, false} {
				name := kind + "/" + method + "/nomatch"
				if ifMatch {
					name = kind + "/" + method + "/ifmatch"
				}
				t.Run(name, func(t *testing.T) {
					sess := "res-" + strings.NewReplacer("/", "-").Replace(name)
					subj := "subj-" + testenv.RandomID(8)
					secret := "secret-" + testenv.RandomID(12)
					path := "/v1/sessions/" + sess + "/state"
					r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"secret": secret}, "user_id": subj})
					require.Equal(t, 201, r.Status, string(r.Body))
					r = s.Do("POST", "/v1/sessions/"+sess+"/messages", key, map[string]any{"role": "user", "content": "hello " + secret, "user_id": subj})
					require.Equal(t, 201, r.Status, string(r.Body))
					if strings.HasPrefix(kind, "legacy") {
						// A row written by the previous release: no write lineage, in
						// Postgres or in Redis (the copy restored from that row).
						_, err := owner.Exec(context.Background(), `UPDATE working_sessions SET write_lineage = NULL WHERE session_id = $1`, sess)
						require.NoError(t, err)
						dropSession(t, rc, s.Prefix, "acme", sess)
						require.Equal(t, 200, s.Do("GET", path, key, nil).Status)
					}
					before := resurrectDurable(t, owner, sess)
					require.Equal(t, int64(1), before.version)
					rollback := snapshotSession(t, rc, s.Prefix, "acme", sess)

					if strings.HasSuffix(kind, "delete") {
						require.Equal(t, 204, s.Do("DELETE", path, key, nil).Status)
					} else {
						r := s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": subj})
						require.Equal(t, 202, r.Status, string(r.Body))
						waitErasure(t, s, comp, r.Map(t)["id"].(string))
					}
					tomb := resurrectDurable(t, owner, sess)
					require.True(t, tomb.deleted)
					require.Empty(t, tomb.state)
					require.Empty(t, tomb.user)
					require.GreaterOrEqual(t, tomb.version, before.version, "the version went backwards")
					rollback() // Redis is back at v1, with the secret and the subject

					var hdr []string
					if ifMatch {
						hdr = []string{"If-Match", `"1"`}
					}
					body := map[string]any{"state": map[string]any{"b": 2}}
					r = s.Do(method, path, key, body, hdr...)
					after := resurrectDurable(t, owner, sess)
					require.NotContains(t, after.state, secret, "the erased state is in Postgres again (answer %d %s)", r.Status, r.Body)
					require.NotEqual(t, subj, after.user, "the erased subject is in Postgres again (answer %d %s)", r.Status, r.Body)
					require.GreaterOrEqual(t, after.version, tomb.version, "the version went backwards")
					switch r.Status {
					case 409:
						require.True(t, after.deleted, "a refused write undeleted the session")
						require.Equal(t, tomb.version, after.version)
						require.Equal(t, 404, s.Do("GET", path, key, nil).Status, "after the refusal the session must read as deleted")
					case 200, 201:
						require.NotContains(t, string(r.Body), secret)
						require.NotContains(t, string(r.Body), subj)
						st := decodeState(t, r)
						require.Equal(t, map[string]any{"b": float64(2)}, st.State)
						require.Greater(t, st.Version, tomb.version)
					default:
						t.Fatalf("unexpected answer %d %s", r.Status, r.Body)
					}

					// The ETag from before the delete never matches again.
					r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"c": 3}}, "If-Match", `"1"`)
					require.Equal(t, 409, r.Status, "a stale ETag from before the delete matched: %s", r.Body)
					// A fresh session can be created; it continues the numbering and holds
					// nothing of the deleted one.
					r = s.Do("PUT", path, key, map[string]any{"state": map[string]any{"c": 3}})
					require.Contains(t, []int{200, 201}, r.Status, string(r.Body))
					st := decodeState(t, r)
					require.Equal(t, map[string]any{"c": float64(3)}, st.State)
					require.Empty(t, st.UserID)
					fresh := resurrectDurable(t, owner, sess)
					require.Equal(t, st.Version, fresh.version)
					require.Greater(t, fresh.version, tomb.version)
					require.NotContains(t, fresh.state, secret)
					require.Empty(t, fresh.user)
					got := decodeState(t, s.Do("GET", path, key, nil))
					require.Equal(t, st.Version, got.Version)
					require.Equal(t, st.State, got.State)
				})
			}
		}
	}
}

// TestWorkingResurrectTurnAfterRollback: as above, but the first write on the rolled-back
// copy is a turn. Appending to that copy would bring the deleted session and its subject
// back into Postgres; the turn must instead go to a fresh session that names no one and
// holds nothing of the deleted one.
func TestWorkingResurrectTurnAfterRollback(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t)
	key := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	owner := testenv.OwnerConn(t, s.DBURL)
	rc := testenv.RedisClient(t)

	for _, kind := range []string{"delete", "erase"} {
		t.Run(kind, func(t *testing.T) {
			sess := "res-turn-" + kind
			subj := "subj-" + testenv.RandomID(8)
			secret := "secret-" + testenv.RandomID(12)
			path := "/v1/sessions/" + sess + "/state"
			msgs := "/v1/sessions/" + sess + "/messages"
			r := s.Do("PUT", path, key, map[string]any{"state": map[string]any{"secret": secret}, "user_id": subj})
			require.Equal(t, 201, r.Status, string(r.Body))
			r = s.Do("POST", msgs, key, map[string]any{"role": "user", "content": "hello " + secret, "user_id": subj})
			require.Equal(t, 201, r.Status, string(r.Body))
			rollback := snapshotSession(t, rc, s.Prefix, "acme", sess)
			if kind == "delete" {
				require.Equal(t, 204, s.Do("DELETE", path, key, nil).Status)
			} else {
				r := s.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": subj})
				require.Equal(t, 202, r.Status, string(r.Body))
				waitErasure(t, s, comp, r.Map(t)["id"].(string))
			}
			tomb := resurrectDurable(t, owner, sess)
			rollback()

			r = s.Do("POST", msgs, key, map[string]any{"role": "user", "content": "again"})
			require.Equal(t, 201, r.Status, string(r.Body))
			require.NotContains(t, string(r.Body), subj)
			after := resurrectDurable(t, owner, sess)
			require.NotEqual(t, subj, after.user, "the deleted session's subject is in Postgres again")
			require.NotContains(t, after.state, secret)
			require.GreaterOrEqual(t, after.version, tomb.version)
			var n int
			require.NoError(t, owner.QueryRow(context.Background(), `SELECT count(*) FROM working_turns
				WHERE session_id = $1 AND (user_id = $2 OR content LIKE '%' || $3 || '%')`, sess, subj, secret).Scan(&n))
			require.Zero(t, n, "turns of the deleted session (or naming its subject) are in Postgres again")
			buf := s.Do("GET", msgs, key, nil)
			require.Equal(t, 200, buf.Status, string(buf.Body))
			require.NotContains(t, string(buf.Body), secret)

			// The state is not the deleted one either.
			r = s.Do("PATCH", path, key, map[string]any{"state": map[string]any{"b": 2}})
			require.Contains(t, []int{200, 201, 409}, r.Status, string(r.Body))
			require.NotContains(t, string(r.Body), secret)
			require.NotContains(t, resurrectDurable(t, owner, sess).state, secret)
		})
	}
}
