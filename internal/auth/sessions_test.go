package auth_test

import (
	"context"
	"crypto/sha256"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/auth"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
	"github.com/strata-mem/strata/migrations"
)

// TestConsoleSessionsUnderRowLevelSecurity: console_sessions forces row-level security
// (migrations/0039). On the server's own pool (strata_app) a transaction sees and changes
// only its org's sessions and none without an org; the sign-in lookup, logout and
// revocation work through their definer functions, and each reaches only the session or
// key its caller names — no other org's session is reachable through them.
func TestConsoleSessionsUnderRowLevelSecurity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	s := auth.NewStore(pool, "", "root")
	idle, absolute := 30*time.Minute, 12*time.Hour
	now := time.Now().UTC().Truncate(time.Microsecond)

	newKey := func(org string) auth.Principal {
		var k auth.Key
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			var err error
			k, _, err = s.Create(ctx, tx, org, strata.RoleAdmin, "", "test")
			return err
		}))
		return auth.Principal{KeyID: k.ID, OrgID: org, Role: strata.RoleAdmin}
	}
	a, b := newKey("cs-a"), newKey("cs-b")
	secretA, _, err := s.StartSession(ctx, a, absolute, idle, now)
	require.NoError(t, err)
	secretB, _, err := s.StartSession(ctx, b, absolute, idle, now)
	require.NoError(t, err)
	secretB2, _, err := s.StartSession(ctx, b, absolute, idle, now)
	require.NoError(t, err)

	// Unfiltered statements on the request role see only the transaction's org.
	visible := func(org string) (n int) {
		require.NoError(t, pg.InOrgTx(ctx, pool, org, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n)
		}))
		return n
	}
	require.Equal(t, 1, visible("cs-a"))
	require.Equal(t, 2, visible("cs-b"))
	require.Equal(t, 0, visible("cs-c"))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n)) // no org at all
	require.Zero(t, n)
	require.NoError(t, pg.InOrgTx(ctx, pool, "cs-a", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE console_sessions SET expires_at = now() + interval '10 years'`)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected()) // its own only
		tag, err = tx.Exec(ctx, `DELETE FROM console_sessions WHERE org_id = 'cs-b'`)
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected())
		return nil
	}))
	// Writing a session for another org from org A's transaction is refused.
	err = pg.InOrgTx(ctx, pool, "cs-a", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO console_sessions (id_hash, key_id, org_id, role, expires_at)
			VALUES ('\x01', $1, 'cs-b', 'admin', now() + interval '1 hour')`, b.KeyID)
		return err
	})
	require.ErrorContains(t, err, "row-level security")
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE org_id = 'cs-b'`).Scan(&n))
	require.Equal(t, 2, n)

	// The sign-in lookup: by the secret, in no org, it finds exactly that session.
	p, sess, err := s.Session(ctx, secretA, idle, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, a.KeyID, p.KeyID)
	require.Equal(t, "cs-a", p.OrgID)
	require.Equal(t, auth.ViaConsole, p.Via)
	require.Equal(t, now.Add(time.Minute), sess.LastSeen.UTC())
	p, _, err = s.Session(ctx, secretB, idle, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, "cs-b", p.OrgID)
	for _, wrong := range []string{"", "nope", secretA + "x", secretA[1:]} {
		_, _, err = s.Session(ctx, wrong, idle, now.Add(time.Minute))
		require.ErrorIs(t, err, strata.ErrNotFound, wrong)
	}
	// The function answers only for the exact hash: not a prefix, a NULL or an empty one.
	for _, h := range [][]byte{nil, {}, hashOf(secretA)[:16]} {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM strata_console_session($1, now(), now() - interval '1 day')`, h).Scan(&n))
		require.Zero(t, n)
	}
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM strata_console_session($1, $2, $3)`, hashOf(secretA),
		now.Add(2*time.Minute), now.Add(-idle)).Scan(&n))
	require.Equal(t, 1, n)
	// An expired session is not found.
	_, _, err = s.Session(ctx, secretB2, idle, now.Add(absolute+time.Second))
	require.ErrorIs(t, err, strata.ErrNotFound)

	// Logout ends the caller's own session only.
	require.NoError(t, s.EndSession(ctx, secretB))
	_, _, err = s.Session(ctx, secretB, idle, now.Add(time.Minute))
	require.ErrorIs(t, err, strata.ErrNotFound)
	_, _, err = s.Session(ctx, secretB2, idle, now.Add(time.Minute))
	require.NoError(t, err)
	_, _, err = s.Session(ctx, secretA, idle, now.Add(time.Minute))
	require.NoError(t, err)

	// Ending a key's sessions reaches nothing while the key is live, whoever asks.
	require.NoError(t, pool.QueryRow(ctx, `SELECT strata_console_sessions_end_key($1)`, b.KeyID).Scan(&n))
	require.Zero(t, n)
	// The root key revoking org B's key runs in its own org's transaction: B's sessions end
	// with the key all the same, and A's stay.
	require.NoError(t, pg.InOrgTx(ctx, pool, "root-org", func(tx pgx.Tx) error {
		_, err := s.Revoke(ctx, tx, "cs-b", b.KeyID)
		return err
	}))
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE org_id = 'cs-b'`).Scan(&n))
	require.Zero(t, n)
	require.Equal(t, 1, visible("cs-a"))

	// Starting a session sweeps the expired ones of every org (a count, no rows, comes back).
	_, _, err = s.StartSession(ctx, newKey("cs-c"), absolute, idle, now.Add(absolute+time.Second))
	require.NoError(t, err)
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE org_id = 'cs-a'`).Scan(&n))
	require.Zero(t, n)
	require.Equal(t, 1, visible("cs-c"))
}

func hashOf(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// TestConsoleSignInWithAnOwnerBoundByRowLevelSecurity migrates a database as a schema owner
// that is neither superuser nor BYPASSRLS, so forced row-level security binds the owner —
// and so the SECURITY DEFINER functions, which run as it — too. Sign-in, lookup, logout and
// revocation still work (migrations/0039's owner_functions policy lets the owner through),
// while the request role still sees only its org's sessions.
func TestConsoleSignInWithAnOwnerBoundByRowLevelSecurity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testenv.OwnerConn(t, testenv.BaseDatabaseURL())
	role, password := "strata_own_"+testenv.RandomID(4), testenv.RandomID(12)
	db := "strata_own_" + testenv.RandomID(6)
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE PASSWORD '` + password + `'`,
		`GRANT strata_app TO ` + role, // what an operator does once; the migration cannot, unprivileged
		`CREATE DATABASE ` + db + ` OWNER ` + role,
	} {
		_, err := admin.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, testenv.BaseDatabaseURL())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`)
		_, _ = c.Exec(ctx, `DROP ROLE IF EXISTS `+role)
	})
	u, err := url.Parse(testenv.BaseDatabaseURL())
	require.NoError(t, err)
	su := *u
	su.Path = "/" + db
	super := testenv.OwnerConn(t, su.String())
	_, err = super.Exec(ctx, `CREATE EXTENSION vector`) // an extension the owner may not create
	require.NoError(t, err)
	u.User, u.Path = url.UserPassword(role, password), "/"+db
	dsn := u.String()
	_, err = migrations.Apply(ctx, dsn, nil)
	require.NoError(t, err)

	owner := testenv.OwnerConn(t, dsn)
	var superuser, bypass bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).Scan(&superuser, &bypass))
	require.False(t, superuser || bypass)

	pool, err := pg.NewPool(ctx, dsn, pg.PoolOptions{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := auth.NewStore(pool, "", "root")
	var k auth.Key
	require.NoError(t, pg.InOrgTx(ctx, pool, "own-a", func(tx pgx.Tx) error {
		k, _, err = s.Create(ctx, tx, "own-a", strata.RoleAdmin, "", "test")
		return err
	}))
	p := auth.Principal{KeyID: k.ID, OrgID: "own-a", Role: strata.RoleAdmin}
	now := time.Now().UTC()
	secret, _, err := s.StartSession(ctx, p, time.Hour, time.Hour, now)
	require.NoError(t, err)
	got, _, err := s.Session(ctx, secret, time.Hour, now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, k.ID, got.KeyID)
	require.NoError(t, s.EndSession(ctx, secret))
	_, _, err = s.Session(ctx, secret, time.Hour, now.Add(time.Second))
	require.ErrorIs(t, err, strata.ErrNotFound)

	secret, _, err = s.StartSession(ctx, p, time.Hour, time.Hour, now)
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n)) // the request role, no org
	require.Zero(t, n)
	require.NoError(t, pg.InOrgTx(ctx, pool, "own-a", func(tx pgx.Tx) error {
		_, err := s.Revoke(ctx, tx, "own-a", k.ID)
		return err
	}))
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n))
	require.Zero(t, n, "the revoked key's session outlived it")
	_, _, err = s.Session(ctx, secret, time.Hour, now.Add(time.Second))
	require.ErrorIs(t, err, strata.ErrNotFound)

	// Without the policy this owner's functions would see no session: sign-in would fail.
	_, err = owner.Exec(ctx, `DROP POLICY owner_functions ON console_sessions`)
	require.NoError(t, err)
	p2 := auth.Principal{KeyID: "root", OrgID: "root", Role: strata.RoleAdmin}
	secret, _, err = s.StartSession(ctx, p2, time.Hour, time.Hour, now)
	require.NoError(t, err)
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n))
	require.Equal(t, 1, n) // the session is there (the superuser sees it)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM strata_console_session($1, $2, $3)`, hashOf(secret),
		now, now.Add(-time.Hour)).Scan(&n))
	require.Zero(t, n)
}
