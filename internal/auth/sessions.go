package auth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Console sessions (migrations/0028_console_sessions.sql): a key signed in at /console is
// exchanged for a random session secret carried by a cookie. Only the secret's SHA-256 is
// stored, with the key's id, org and role — never the key's secret. A session ends at its
// absolute expiry, after idle time without a request, at logout, or when its key is revoked
// (Revoke deletes the key's sessions, and every lookup checks the key is still live).
//
// The table forces row-level security (migrations/0039): a session is written in a
// transaction bound to its org, and what must work before the org is known (the lookup by
// the cookie's hash, logout, a revoked key's sessions, the sweep of expired ones) goes
// through that migration's SECURITY DEFINER functions, each keyed by what its caller holds.

// Session is a console session's record.
type Session struct {
	KeyID     string
	OrgID     string
	Role      strata.Role
	CreatedAt time.Time
	LastSeen  time.Time
	ExpiresAt time.Time
}

// ViaConsole marks a principal acting through the web console (audit records say so).
const ViaConsole = "console"

// ViaMCP and ViaMem0 mark requests that reached the API through the MCP server or the
// Mem0-compatible API, with the caller's own key (WithVia).
const (
	ViaMCP  = "mcp"
	ViaMem0 = "mem0"
)

type inProcessKey struct{}

type viaKey struct{}

// WithVia marks ctx as an in-process call made through channel via (ViaMCP, ViaMem0) with
// the caller's own key: the API authenticates the key as usual and its audit records say
// which channel the write came through. Like WithInProcessPrincipal, no HTTP client can set it.
func WithVia(ctx context.Context, via string) context.Context {
	return context.WithValue(ctx, viaKey{}, via)
}

// ViaOf is the channel WithVia marked ctx with ("" for the API itself).
func ViaOf(ctx context.Context) string {
	v, _ := ctx.Value(viaKey{}).(string)
	return v
}

// WithInProcessPrincipal marks ctx as an in-process call made on p's behalf by the console
// (which authenticated p from its session). Only code inside the server can set a context
// value, so the API's authenticate middleware may trust it: no HTTP client can forge one.
func WithInProcessPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, inProcessKey{}, p)
}

// InProcessPrincipal is the principal of an in-process call (WithInProcessPrincipal).
func InProcessPrincipal(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(inProcessKey{}).(Principal)
	return p, ok
}

// StartSession records a session for p, valid until now+absolute, and returns its secret
// (for the cookie; only its hash is stored). Expired sessions are swept on the way.
func (s *Store) StartSession(ctx context.Context, p Principal, absolute, idle time.Duration, now time.Time) (string, Session, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", Session{}, err
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	sess := Session{KeyID: p.KeyID, OrgID: p.OrgID, Role: p.Role, CreatedAt: now, LastSeen: now, ExpiresAt: now.Add(absolute)}
	err := pg.InOrgTx(ctx, s.pool, p.OrgID, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT strata_console_sessions_sweep($1, $2)`, now, now.Add(-idle)); err != nil {
			return fmt.Errorf("sweeping console sessions: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO console_sessions (id_hash, key_id, org_id, role, created_at, last_seen_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $5, $6)`, hash(secret), p.KeyID, p.OrgID, string(p.Role), now, sess.ExpiresAt); err != nil {
			return fmt.Errorf("starting a console session: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", Session{}, pg.Interpret(err)
	}
	return secret, sess, nil
}

// Session resolves a session secret to its principal (marked Via console) and records the
// request as the session's last activity. An unknown, expired (absolute or idle), ended or
// revoked-key session is strata.ErrNotFound.
func (s *Store) Session(ctx context.Context, secret string, idle time.Duration, now time.Time) (Principal, Session, error) {
	var sess Session
	var role string
	err := s.pool.QueryRow(ctx, `SELECT key_id, org_id, role, created_at, last_seen_at, expires_at
		FROM strata_console_session($1, $2, $3)`, hash(secret), now, now.Add(-idle)).
		Scan(&sess.KeyID, &sess.OrgID, &role, &sess.CreatedAt, &sess.LastSeen, &sess.ExpiresAt)
	if err != nil {
		return Principal{}, Session{}, pg.Interpret(err)
	}
	sess.Role = strata.Role(role)
	p := Principal{KeyID: sess.KeyID, OrgID: sess.OrgID, Role: sess.Role, Via: ViaConsole}
	if sess.KeyID == "root" {
		if s.rootKey == nil || sess.OrgID != s.rootOrg { // the bootstrap key was removed or moved
			return Principal{}, Session{}, strata.ErrNotFound
		}
		p.Root = true
	}
	return p, sess, nil
}

// EndSession deletes the session (logout). An unknown secret is not an error.
func (s *Store) EndSession(ctx context.Context, secret string) error {
	_, err := s.pool.Exec(ctx, `SELECT strata_console_session_end($1)`, hash(secret))
	return pg.Interpret(err)
}
