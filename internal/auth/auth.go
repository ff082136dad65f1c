// Package auth owns API keys: random secrets shown once at creation, stored only as their
// SHA-256, each bound to one org and one role. Revocation is a row update that the next
// lookup sees, so it takes effect at once on every replica.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Principal is who is calling: the key, its org and its role. Root marks the bootstrap
// admin key (STRATA_ADMIN_KEY), which may manage keys of every org.
type Principal struct {
	KeyID string
	OrgID string
	Role  strata.Role
	Root  bool
	// Via names the channel a request came through when it is not the API itself
	// (ViaConsole); audit records carry it.
	Via string
}

// Can reports whether the principal holds one of roles. Admin can do everything.
func (p Principal) Can(roles ...strata.Role) bool {
	if p.Role == strata.RoleAdmin {
		return true
	}
	for _, r := range roles {
		if p.Role == r {
			return true
		}
	}
	return false
}

type principalKey struct{}

// WithPrincipal attaches p to ctx.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	c, _ := WithPrincipalShared(ctx, p)
	return c
}

// WithPrincipalShared is WithPrincipal that also returns the context's copy of p, for a
// caller that shares it (read only) instead of keeping a copy of its own: the context and
// the principal are one allocation (every request makes one).
func WithPrincipalShared(ctx context.Context, p Principal) (context.Context, *Principal) {
	c := &principalCtx{Context: ctx, p: p}
	return c, &c.p
}

// principalCtx is a context carrying the caller (context.WithValue's behaviour, with the
// value stored inline).
type principalCtx struct {
	context.Context
	p Principal
}

func (c *principalCtx) Value(key any) any {
	if _, ok := key.(principalKey); ok {
		return &c.p
	}
	return c.Context.Value(key)
}

// FromContext returns the caller; ok is false on unauthenticated routes.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	if !ok {
		return Principal{}, false
	}
	return *p, true
}

// Key is an API key's metadata (never its secret).
type Key struct {
	ID        string      `json:"id"`
	OrgID     string      `json:"org_id"`
	Role      strata.Role `json:"role"`
	Name      string      `json:"name,omitempty"`
	Prefix    string      `json:"prefix" doc:"The first characters of the secret, to recognise it"`
	CreatedBy string      `json:"created_by,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
	RevokedAt *time.Time  `json:"revoked_at,omitempty"`
}

// Store reads and writes api_keys. The table has no row-level security (the org is what a
// lookup finds out), so every query here filters by org explicitly.
type Store struct {
	pool    *pgxpool.Pool
	rootKey []byte // sha256 of STRATA_ADMIN_KEY, or nil
	rootOrg string
	cache   *keyCache
	revoked broadcast // closed at each revocation heard (Revoked)
}

// NewStore returns a key store. rootKey, when set, is accepted as an admin of every org
// acting in rootOrg.
func NewStore(pool *pgxpool.Pool, rootKey, rootOrg string) *Store {
	s := &Store{pool: pool, rootOrg: rootOrg, cache: newKeyCache(time.Minute)}
	if rootKey != "" {
		h := sha256.Sum256([]byte(rootKey))
		s.rootKey = h[:]
	}
	return s
}

// NewSecret returns a fresh random key secret.
func NewSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "sk_" + base64.RawURLEncoding.EncodeToString(b)
}

func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Create makes a key for org with role and returns it with its secret (shown only now).
func (s *Store) Create(ctx context.Context, q pg.DBTX, org string, role strata.Role, name, createdBy string) (Key, string, error) {
	secret := NewSecret()
	k := Key{ID: "key_" + uuid.Must(uuid.NewV7()).String(), OrgID: org, Role: role, Name: name,
		Prefix: secret[:10], CreatedBy: createdBy}
	err := q.QueryRow(ctx, `INSERT INTO api_keys (org_id, id, key_hash, prefix, role, name, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`,
		org, k.ID, hash(secret), k.Prefix, string(role), name, createdBy).Scan(&k.CreatedAt)
	if err != nil {
		return Key{}, "", pg.Interpret(fmt.Errorf("creating key: %w", err))
	}
	return k, secret, nil
}

// Authenticate resolves a secret to its principal. Unknown and revoked keys are
// strata.ErrNotFound; a database outage is an UnavailableError.
func (s *Store) Authenticate(ctx context.Context, secret string) (Principal, error) {
	// The secret's bytes on the stack (a key is far shorter than the buffer): hashing a
	// string costs no allocation on the hot path, which every request takes.
	var buf [128]byte
	h := sha256.Sum256(append(buf[:0], secret...))
	if s.rootKey != nil && subtle.ConstantTimeCompare(h[:], s.rootKey) == 1 {
		return Principal{KeyID: "root", OrgID: s.rootOrg, Role: strata.RoleAdmin, Root: true}, nil
	}
	now := time.Now()
	p, ok, gen := s.cache.get(h, now)
	if ok {
		return p, nil
	}
	return s.lookup(ctx, h, gen, now)
}

// lookup asks Postgres for the key with hash h and caches it (a cache miss: Authenticate's
// own variables stay on the stack, since only this path hands them to pgx).
func (s *Store) lookup(ctx context.Context, h [sha256.Size]byte, gen uint64, now time.Time) (Principal, error) {
	var p Principal
	var role string
	err := s.pool.QueryRow(ctx, `SELECT id, org_id, role FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`, h[:]).
		Scan(&p.KeyID, &p.OrgID, &role)
	if err != nil {
		return Principal{}, pg.Interpret(err)
	}
	p.Role = strata.Role(role)
	s.cache.put(h, p, gen, now)
	return p, nil
}

// List returns org's keys ordered by id, after the cursor id.
func (s *Store) List(ctx context.Context, q pg.DBTX, org, after string, limit int) ([]Key, error) {
	rows, err := q.Query(ctx, `SELECT id, org_id, role, name, prefix, created_by, created_at, revoked_at
		FROM api_keys WHERE org_id = $1 AND id > $2 ORDER BY id LIMIT $3`, org, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) {
		var k Key
		var role string
		err := r.Scan(&k.ID, &k.OrgID, &role, &k.Name, &k.Prefix, &k.CreatedBy, &k.CreatedAt, &k.RevokedAt)
		k.Role = strata.Role(role)
		return k, err
	})
	return keys, pg.Interpret(err)
}

// OrgOf is the org that key id belongs to (the root key may revoke any org's key and finds
// its org first). An unknown id is ErrNotFound.
func (s *Store) OrgOf(ctx context.Context, q pg.DBTX, id string) (string, error) {
	var org string
	err := q.QueryRow(ctx, `SELECT org_id FROM api_keys WHERE id = $1`, id).Scan(&org)
	return org, pg.Interpret(err)
}

// Exists reports whether org has a key with this id (revoked or not).
func (s *Store) Exists(ctx context.Context, q pg.DBTX, org, id string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE org_id = $1 AND id = $2)`, org, id).Scan(&ok)
	return ok, pg.Interpret(err)
}

// Revoke revokes org's key id and, in the same transaction, notifies every replica to drop
// its cached lookups. Revoking twice is fine; an unknown id is ErrNotFound.
func (s *Store) Revoke(ctx context.Context, q pg.DBTX, org, id string) (Key, error) {
	var k Key
	var role string
	err := q.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
		WHERE org_id = $1 AND id = $2
		RETURNING id, org_id, role, name, prefix, created_by, created_at, revoked_at`, org, id).
		Scan(&k.ID, &k.OrgID, &role, &k.Name, &k.Prefix, &k.CreatedBy, &k.CreatedAt, &k.RevokedAt)
	k.Role = strata.Role(role)
	if err != nil {
		return k, pg.Interpret(err)
	}
	// The key's console sessions end with it (Session also refuses a revoked key's). Through
	// the definer function: the root key revoking another org's key runs in its own org.
	if _, err = q.Exec(ctx, `SELECT strata_console_sessions_end_key($1)`, id); err != nil {
		return k, pg.Interpret(err)
	}
	_, err = q.Exec(ctx, `SELECT pg_notify($1, $2)`, RevocationChannel, id)
	return k, pg.Interpret(err)
}
