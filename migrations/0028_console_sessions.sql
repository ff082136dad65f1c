-- Web console sessions (internal/console, docs/console.md): an API key signed in at /console
-- is exchanged for a server-side session. The cookie holds a random secret; only its SHA-256
-- is stored here, with the key's id (never the key's secret), org and role. A session ends at
-- its idle or absolute expiry, at logout, or when its key is revoked (auth.Store.Revoke
-- deletes the key's sessions in the revoking transaction, and every lookup joins api_keys).
-- Like api_keys it is found before the org is known, so it has no row-level security; it
-- holds no memory and no personal data.
CREATE TABLE console_sessions (
  id_hash      bytea PRIMARY KEY,
  key_id       text NOT NULL,
  org_id       text NOT NULL CHECK (org_id <> ''),
  role         text NOT NULL CHECK (role IN ('agent', 'compliance', 'admin')),
  created_at   timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL
);
CREATE INDEX console_sessions_key ON console_sessions (key_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
