package working

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// These tests attack the tombstone's head from inside the package, on the paths the HTTP
// tests do not reach: the eviction worker's purge, and a write whose Redis half ran before
// a delete and whose durable half arrives after it.

type tombRow struct {
	state   *string
	user    *string
	version int64
	deleted bool
}

func (b *bundle) tombRow(t *testing.T, org, session string) tombRow {
	t.Helper()
	owner := testenv.OwnerConn(t, b.dsn)
	var r tombRow
	require.NoError(t, owner.QueryRow(b.ctx, `SELECT state::text, user_id, version, deleted_at IS NOT NULL
		FROM working_sessions WHERE org_id = $1 AND session_id = $2`, org, session).Scan(&r.state, &r.user, &r.version, &r.deleted))
	return r
}

// snapshot DUMPs the session's Redis keys; the returned func RESTOREs them (a failover to
// a replica that missed what happened since, or a restored backup).
func (b *bundle) snapshot(t *testing.T, org, session string) func() {
	t.Helper()
	k := b.store.sessionKeys(org, session)
	dumps := map[string]string{}
	for _, key := range []string{k.meta, k.turns} {
		d, err := b.rdb.Dump(b.ctx, key).Result()
		if err == nil {
			dumps[key] = d
		}
	}
	require.Contains(t, dumps, k.meta)
	return func() {
		require.NoError(t, b.rdb.Del(b.ctx, k.meta, k.turns).Err())
		for key, d := range dumps {
			require.NoError(t, b.rdb.RestoreReplace(b.ctx, key, time.Hour, d).Err())
		}
	}
}

func isConflict(err error) bool {
	var ce *strata.ConflictError
	return errors.As(err, &ce)
}

// TestPurgeThenRolledBackRedisRefusesWrite: an idle session is purged (Postgres reduced to
// a tombstone, Redis copy dropped), then Redis comes back with the copy from before. Writes
// built on it are refused, the session stays purged, and a later write starts a fresh one
// above the tombstone's version.
func TestPurgeThenRolledBackRedisRefusesWrite(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	const org, session = "o", "purged"
	one := int64(1)
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error {
		_, _, err := b.store.Put(b.ctx, tx, org, session, Write{State: json.RawMessage(`{"secret":"s3cr3t"}`), UserID: "alice"})
		return err
	}))
	rollback := b.snapshot(t, org, session)
	b.clock.Advance(time.Hour)
	var purged []PurgedSession
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error {
		var err error
		purged, err = b.store.PurgeIdle(b.ctx, tx, org, []string{session}, b.clock.Now())
		return err
	}))
	require.Len(t, purged, 1)
	require.NoError(t, b.store.DropLive(b.ctx, org, purged))
	tomb := b.tombRow(t, org, session)
	require.True(t, tomb.deleted)
	require.GreaterOrEqual(t, tomb.version, int64(1), "the version went backwards")
	rollback()

	for _, w := range []struct {
		name  string
		patch bool
		match *int64
	}{{"put if-match", false, &one}, {"patch if-match", true, &one}, {"put", false, nil}, {"patch", true, nil}} {
		err := b.inTx(org, func(tx pgx.Tx) error {
			wr := Write{State: json.RawMessage(`{"b":2}`), IfMatch: w.match}
			var err error
			if w.patch {
				_, _, err = b.store.Patch(b.ctx, tx, org, session, wr)
			} else {
				_, _, err = b.store.Put(b.ctx, tx, org, session, wr)
			}
			return err
		})
		row := b.tombRow(t, org, session)
		if err != nil {
			require.True(t, isConflict(err), "%s: %v", w.name, err)
			require.True(t, row.deleted, "%s: a refused write undeleted the session", w.name)
			require.Equal(t, tomb.version, row.version)
			rollback() // again, for the next attempt
			continue
		}
		// Accepted: only as a fresh session above the tombstone, naming no one.
		require.NotNil(t, row.state)
		require.NotContains(t, *row.state, "s3cr3t", w.name)
		require.Nil(t, row.user, w.name)
		require.Greater(t, row.version, tomb.version, w.name)
		t.Fatalf("%s: a write on the copy from before the purge was acknowledged (it is built on v1)", w.name)
	}

	require.NoError(t, b.rdb.Del(b.ctx, b.store.sessionKeys(org, session).meta, b.store.sessionKeys(org, session).turns).Err())
	_, err := b.store.Get(b.ctx, b.pool, org, session)
	require.ErrorIs(t, err, strata.ErrNotFound)
	var st State
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error {
		var err error
		st, _, err = b.store.Put(b.ctx, tx, org, session, Write{State: json.RawMessage(`{"fresh":true}`)})
		return err
	}))
	require.Equal(t, int64(2), tomb.version, "the tombstone takes the next version")
	require.Equal(t, int64(3), st.Version)
	require.Empty(t, st.UserID)
	row := b.tombRow(t, org, session)
	require.False(t, row.deleted)
	require.Equal(t, int64(3), row.version)
	require.JSONEq(t, `{"fresh":true}`, *row.state)
}

// TestWriteInFlightAcrossDeleteIsRefused: a write's Redis half runs (v2), then the session
// is deleted and the delete commits, then the write's durable half arrives. It was built
// on the deleted state: it must be refused, and the session must stay deleted.
func TestWriteInFlightAcrossDeleteIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	const org, session = "o", "inflight"
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error {
		_, _, err := b.store.Put(b.ctx, tx, org, session, Write{State: json.RawMessage(`{"secret":"s3cr3t"}`), UserID: "alice"})
		return err
	}))
	b.store.afterRedisWrite = func() error {
		b.store.afterRedisWrite = nil
		return b.inTx(org, func(tx pgx.Tx) error { return b.store.Delete(b.ctx, tx, org, session, nil) })
	}
	err := b.inTx(org, func(tx pgx.Tx) error {
		_, _, err := b.store.Patch(b.ctx, tx, org, session, Write{State: json.RawMessage(`{"b":2}`)})
		return err
	})
	require.True(t, isConflict(err), "the write built on the deleted state was acknowledged: %v", err)
	row := b.tombRow(t, org, session)
	require.True(t, row.deleted, "the deleted session came back")
	require.Nil(t, row.state)
	require.Nil(t, row.user)
	require.Equal(t, int64(3), row.version, "above the write's v2")
	_, err = b.store.Get(b.ctx, b.pool, org, session)
	require.ErrorIs(t, err, strata.ErrNotFound)
	var st State
	require.NoError(t, b.inTx(org, func(tx pgx.Tx) error {
		var err error
		st, _, err = b.store.Put(b.ctx, tx, org, session, Write{State: json.RawMessage(`{"fresh":true}`)})
		return err
	}))
	require.Equal(t, int64(4), st.Version)
}
