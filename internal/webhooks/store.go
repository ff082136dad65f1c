// Package webhooks delivers outbox events (internal/outbox) to per-org HTTP subscriptions
// (docs/events.md): the subscriptions and their sealed signing secrets, the dispatcher that
// fans each org's committed events out into deliveries exactly once (its cursor commits with
// the deliveries), and the Deliverer whose senders POST the deliveries — claimed, sent and
// recorded in batches (batch.go) — signed per Standard Webhooks (webhook-id,
// webhook-timestamp, webhook-signature) with exponential backoff,
// a delivery log of every attempt, and a dead-letter state once attempts run out. Delivery
// is at least once: a receiver dedupes on webhook-id. An SSRF guard refuses URLs that
// resolve to loopback, link-local or private addresses at subscribe time and at dial time,
// unless the operator allows them.
package webhooks

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Subscription is an org's webhook endpoint (never its secret).
type Subscription struct {
	ID          string    `json:"id"`
	URL         string    `json:"url"`
	EventTypes  []string  `json:"event_types" doc:"The event types delivered (\"*\": all)."`
	Active      bool      `json:"active" doc:"Inactive subscriptions receive nothing (events meanwhile are not queued for them)."`
	Description string    `json:"description,omitempty"`
	Version     int64     `json:"version"`
	CreatedBy   string    `json:"created_by" doc:"The API key that created it."`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// PreviousSecretExpiresAt is set after a rotation that kept the previous secret: until
	// then every delivery is signed with both secrets.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty" doc:"After a rotation: until this time deliveries carry a signature with the previous secret too (two in webhook-signature). Past it, the previous secret signs nothing."`
}

// Store holds subscriptions and deliveries. Sealer seals secrets at rest.
type Store struct {
	aead         cipher.AEAD
	AllowPrivate bool // STRATA_WEBHOOK_ALLOW_PRIVATE
	Now          func() time.Time
}

// NewStore makes a store whose secrets are sealed with a key derived from sealKey.
func NewStore(sealKey []byte, allowPrivate bool) *Store {
	k := sha256.Sum256(append([]byte("strata webhook secrets/"), sealKey...))
	block, _ := aes.NewCipher(k[:])
	aead, _ := cipher.NewGCM(block)
	return &Store{aead: aead, AllowPrivate: allowPrivate}
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Store) seal(org, id, secret string) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, []byte(secret), []byte(org+"/"+id))
}

func (s *Store) open(org, id string, sealed []byte) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("webhooks: sealed secret too short")
	}
	b, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(org+"/"+id))
	if err != nil {
		return "", errors.New("webhooks: the subscription's secret cannot be unsealed (was STRATA_PSEUDONYM_KEY changed? rotate the secret)")
	}
	return string(b), nil
}

// Input is what a create or an update sets; nil fields of an update stay as they are.
type Input struct {
	URL         *string
	EventTypes  []string // nil: unchanged (create: required)
	Secret      *string  // create only: "" or nil generates one
	Active      *bool
	Description *string
}

func (s *Store) check(ctx context.Context, in Input, create bool) error {
	if create && in.URL == nil {
		return strata.Invalid("url", "is required")
	}
	if in.URL != nil {
		if err := CheckURL(ctx, *in.URL, s.AllowPrivate); err != nil {
			return err
		}
	}
	if create && in.EventTypes == nil {
		return strata.Invalid("event_types", `is required (a list of event types, or ["*"])`)
	}
	if in.EventTypes != nil {
		if len(in.EventTypes) == 0 {
			return strata.Invalid("event_types", `must name at least one event type (or "*")`)
		}
		if len(in.EventTypes) > 50 {
			return strata.Invalid("event_types", "at most 50")
		}
		if err := outbox.CheckTypes("event_types", in.EventTypes); err != nil {
			return err
		}
	}
	if in.Secret != nil && *in.Secret != "" {
		if err := CheckSecret("secret", *in.Secret); err != nil {
			return err
		}
	}
	if in.Description != nil {
		if len(*in.Description) > 500 {
			return strata.Invalid("description", "at most 500 characters")
		}
		if err := strata.CheckText("description", *in.Description); err != nil {
			return err
		}
	}
	return nil
}

const subCols = `id, url, event_types, active, description, version, created_by, created_at, updated_at, previous_secret_expires_at`

func scanSub(r pgx.Row) (Subscription, error) {
	var x Subscription
	err := r.Scan(&x.ID, &x.URL, &x.EventTypes, &x.Active, &x.Description, &x.Version, &x.CreatedBy, &x.CreatedAt, &x.UpdatedAt,
		&x.PreviousSecretExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return x, fmt.Errorf("webhook subscription: %w", strata.ErrNotFound)
	}
	x.CreatedAt, x.UpdatedAt = x.CreatedAt.UTC(), x.UpdatedAt.UTC()
	if x.PreviousSecretExpiresAt != nil {
		at := x.PreviousSecretExpiresAt.UTC()
		x.PreviousSecretExpiresAt = &at
	}
	return x, pg.Interpret(err)
}

// Create stores a subscription and returns it with its secret (the only time it is shown).
func (s *Store) Create(ctx context.Context, db pg.DBTX, org, by string, in Input) (Subscription, string, error) {
	if err := s.check(ctx, in, true); err != nil {
		return Subscription{}, "", err
	}
	secret := NewSecret()
	if in.Secret != nil && *in.Secret != "" {
		secret = *in.Secret
	}
	active := true
	if in.Active != nil {
		active = *in.Active
	}
	desc := ""
	if in.Description != nil {
		desc = *in.Description
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Subscription{}, "", err
	}
	now := s.now()
	types := slices.Compact(slices.Sorted(slices.Values(in.EventTypes)))
	sub, err := scanSub(db.QueryRow(ctx, `INSERT INTO webhook_subscriptions
			(org_id, id, url, event_types, secret_seal, active, description, created_by, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) RETURNING `+subCols,
		org, id.String(), *in.URL, types, s.seal(org, id.String(), secret), active, desc, by, now))
	return sub, secret, err
}

// Get returns org's subscription id.
func (s *Store) Get(ctx context.Context, db pg.DBTX, org, id string) (Subscription, error) {
	return scanSub(db.QueryRow(ctx, `SELECT `+subCols+` FROM webhook_subscriptions WHERE org_id = $1 AND id = $2`, org, id))
}

// List returns org's subscriptions by id after the cursor.
func (s *Store) List(ctx context.Context, db pg.DBTX, org, after string, limit int) ([]Subscription, error) {
	rows, err := db.Query(ctx, `SELECT `+subCols+` FROM webhook_subscriptions WHERE org_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
		org, after, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Subscription, error) { return scanSub(r) })
	return out, pg.Interpret(err)
}

func stale(cur Subscription, want int64) error {
	return strata.Conflict(fmt.Sprintf("webhook subscription %s is at version %d, not %d", cur.ID, cur.Version, want),
		map[string]any{"version": cur.Version})
}

// Update changes a subscription; ifMatch (when not nil) must be its current version.
func (s *Store) Update(ctx context.Context, db pg.DBTX, org, id string, in Input, ifMatch *int64) (Subscription, error) {
	if in.Secret != nil {
		return Subscription{}, strata.Invalid("secret", "cannot be changed here; rotate it with POST /v1/admin/webhooks/{id}/rotate-secret")
	}
	if err := s.check(ctx, in, false); err != nil {
		return Subscription{}, err
	}
	cur, err := scanSub(db.QueryRow(ctx, `SELECT `+subCols+` FROM webhook_subscriptions WHERE org_id = $1 AND id = $2 FOR UPDATE`, org, id))
	if err != nil {
		return Subscription{}, err
	}
	if ifMatch != nil && *ifMatch != cur.Version {
		return Subscription{}, stale(cur, *ifMatch)
	}
	if in.URL != nil {
		cur.URL = *in.URL
	}
	if in.EventTypes != nil {
		cur.EventTypes = slices.Compact(slices.Sorted(slices.Values(in.EventTypes)))
	}
	if in.Active != nil {
		cur.Active = *in.Active
	}
	if in.Description != nil {
		cur.Description = *in.Description
	}
	return scanSub(db.QueryRow(ctx, `UPDATE webhook_subscriptions SET url = $3, event_types = $4, active = $5, description = $6,
			version = version + 1, updated_at = $7 WHERE org_id = $1 AND id = $2 RETURNING `+subCols,
		org, id, cur.URL, cur.EventTypes, cur.Active, cur.Description, s.now()))
}

// MaxKeepPrevious is the longest a rotated-out secret may keep signing.
const MaxKeepPrevious = 30 * 24 * time.Hour

// RotateSecret replaces the subscription's signing secret with secret ("" generates one)
// and returns the subscription and the new secret (the only time it is shown). For
// keepPrevious after now the secret it replaces stays valid: every delivery is signed with
// both (two signatures in webhook-signature), so a receiver can switch to the new secret
// whenever it likes within that window and refuse nothing meanwhile. keepPrevious 0 retires
// the old secret at once. Only the secret just replaced is kept: a rotation within the
// window retires the one before it. ifMatch as Update.
func (s *Store) RotateSecret(ctx context.Context, db pg.DBTX, org, id, secret string, keepPrevious time.Duration, ifMatch *int64) (Subscription, string, error) {
	if secret != "" {
		if err := CheckSecret("secret", secret); err != nil {
			return Subscription{}, "", err
		}
	} else {
		secret = NewSecret()
	}
	if keepPrevious < 0 || keepPrevious > MaxKeepPrevious {
		return Subscription{}, "", strata.Invalid("keep_previous_seconds", "must be between 0 and %d", int(MaxKeepPrevious.Seconds()))
	}
	cur, err := scanSub(db.QueryRow(ctx, `SELECT `+subCols+` FROM webhook_subscriptions WHERE org_id = $1 AND id = $2 FOR UPDATE`, org, id))
	if err != nil {
		return Subscription{}, "", err
	}
	if ifMatch != nil && *ifMatch != cur.Version {
		return Subscription{}, "", stale(cur, *ifMatch)
	}
	now := s.now()
	var until *time.Time
	if keepPrevious > 0 {
		u := now.Add(keepPrevious)
		until = &u
	}
	sub, err := scanSub(db.QueryRow(ctx, `UPDATE webhook_subscriptions SET
			previous_secret_seal = CASE WHEN $4::timestamptz IS NULL THEN NULL ELSE secret_seal END,
			previous_secret_expires_at = $4, secret_seal = $3, version = version + 1, updated_at = $5
		WHERE org_id = $1 AND id = $2 RETURNING `+subCols,
		org, id, s.seal(org, id, secret), until, now))
	return sub, secret, err
}

// Delete removes a subscription and its delivery log; ifMatch as Update.
func (s *Store) Delete(ctx context.Context, db pg.DBTX, org, id string, ifMatch *int64) (Subscription, error) {
	cur, err := scanSub(db.QueryRow(ctx, `SELECT `+subCols+` FROM webhook_subscriptions WHERE org_id = $1 AND id = $2 FOR UPDATE`, org, id))
	if err != nil {
		return Subscription{}, err
	}
	if ifMatch != nil && *ifMatch != cur.Version {
		return Subscription{}, stale(cur, *ifMatch)
	}
	_, err = db.Exec(ctx, `DELETE FROM webhook_subscriptions WHERE org_id = $1 AND id = $2`, org, id)
	return cur, pg.Interpret(err)
}

// target is what a delivery needs of its subscription.
type target struct {
	url     string
	secrets []string // the current secret, then the previous one while it is still valid
	err     error    // the secret cannot be unsealed: each attempt fails with it
}

// secrets unseals subscription id's signing secrets: the current one, then the previous one
// while it is still valid.
func (s *Store) secrets(org, id string, sealed, prev []byte, prevUntil *time.Time) ([]string, error) {
	cur, err := s.open(org, id, sealed)
	if err != nil {
		return nil, err
	}
	out := []string{cur}
	if prev != nil && prevUntil != nil && prevUntil.After(s.now()) {
		// A previous secret sealed under an older STRATA_PSEUDONYM_KEY is left out: the
		// rotation that followed the key change must not stop the new secret's deliveries.
		if old, err := s.open(org, id, prev); err == nil {
			out = append(out, old)
		}
	}
	return out, nil
}

// activeTargetsSQL selects org's active subscriptions with their event types and what a
// delivery to each needs (the dispatcher's one read of them per pass; collectTargets reads
// its rows).
const activeTargetsSQL = `SELECT id, event_types, url, secret_seal, previous_secret_seal, previous_secret_expires_at
	FROM webhook_subscriptions WHERE org_id = $1 AND active ORDER BY id`

func (s *Store) collectTargets(org string, rows pgx.Rows) ([]subTarget, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (subTarget, error) {
		var x subTarget
		var sealed, prev []byte
		var prevUntil *time.Time
		if err := r.Scan(&x.id, &x.types, &x.t.url, &sealed, &prev, &prevUntil); err != nil {
			return x, err
		}
		x.t.secrets, x.t.err = s.secrets(org, x.id, sealed, prev, prevUntil)
		return x, nil
	})
	return out, pg.Interpret(err)
}

// subTarget is an active subscription as the dispatcher sees it.
type subTarget struct {
	id    string
	types []string
	t     target
}
