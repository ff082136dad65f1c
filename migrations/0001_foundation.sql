-- Foundation: pgvector, the request role, row-level-security helper, API keys, idempotency.

CREATE EXTENSION IF NOT EXISTS vector;

-- The role every request runs as (the pool does SET ROLE strata_app after connecting).
-- It is neither superuser nor BYPASSRLS, so row-level security binds on its queries.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'strata_app') THEN
    CREATE ROLE strata_app NOLOGIN NOSUPERUSER NOBYPASSRLS;
  END IF;
END $$;
DO $$
BEGIN
  EXECUTE format('GRANT strata_app TO %I', current_user);
EXCEPTION WHEN others THEN NULL; -- already a member, or a superuser that needs no grant
END $$;
GRANT USAGE ON SCHEMA public TO strata_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO strata_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO strata_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO strata_app;

-- The org a transaction runs for. An unset setting reads back as '' (or NULL before the
-- first SET in a session); org ids are never empty, so both deny.
CREATE OR REPLACE FUNCTION strata_org() RETURNS text
  LANGUAGE sql STABLE AS $$ SELECT current_setting('app.org_id', true) $$;

-- strata_enable_rls turns on forced row-level security for a tenant table: rows are
-- visible and writable only when their org_id equals the transaction's app.org_id.
CREATE OR REPLACE FUNCTION strata_enable_rls(tbl regclass) RETURNS void
  LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl);
  EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', tbl);
  EXECUTE format('DROP POLICY IF EXISTS org_isolation ON %s', tbl);
  EXECUTE format('CREATE POLICY org_isolation ON %s USING (org_id = strata_org()) WITH CHECK (org_id = strata_org())', tbl);
END $$;

-- API keys: random secrets shown once; only their SHA-256 is stored. This is a lookup table
-- (the org is not known until the key is found), so it has no row-level security; in a
-- distributed deployment it is a reference table. It holds no memory.
CREATE TABLE api_keys (
  org_id      text NOT NULL CHECK (org_id <> ''),
  id          text NOT NULL,
  key_hash    bytea NOT NULL,
  prefix      text NOT NULL,
  role        text NOT NULL CHECK (role IN ('agent', 'compliance', 'admin')),
  name        text NOT NULL DEFAULT '',
  created_by  text NOT NULL DEFAULT '',
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz,
  PRIMARY KEY (org_id, id)
);
CREATE UNIQUE INDEX api_keys_hash ON api_keys (key_hash);
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);

-- Idempotency records: written in the same transaction as the request's own writes, so a
-- replay answers exactly what was committed. Holds the response body (may hold personal
-- data: erasure covers it through user_id and a content match).
CREATE TABLE idempotency_keys (
  org_id           text NOT NULL CHECK (org_id <> ''),
  key              text NOT NULL,
  request_hash     bytea NOT NULL,
  method           text NOT NULL,
  path             text NOT NULL,
  user_id          text,
  response_status  int NOT NULL,
  response_headers jsonb NOT NULL DEFAULT '{}',
  response_body    bytea NOT NULL DEFAULT '',
  created_at       timestamptz NOT NULL DEFAULT now(),
  expires_at       timestamptz NOT NULL,
  PRIMARY KEY (org_id, key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
CREATE INDEX idempotency_keys_user ON idempotency_keys (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('idempotency_keys');
