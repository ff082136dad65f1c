-- Key-value (procedural) memory: scoped entries with versions, TTL and full history.
--
-- An entry lives at exactly one scope level. Its identity is
-- (org_id, namespace, key, level, scope_id): scope_id is the session id, agent id or user id
-- of its level, and '' at org level. The less specific ids a write named (for example the
-- user_id of a session-level preference) are recorded in user_id / agent_id / session_id so
-- that erasure and export find them; they are not part of the identity.
--
-- A DELETE keeps the row as a tombstone (deleted = true, value NULL, version bumped), so
-- versions only ever grow for an identity: ETags, the history and the cache's
-- version-checked fills stay correct across delete and re-create.

CREATE TABLE kv_entries (
  org_id      text NOT NULL CHECK (org_id <> ''),
  namespace   text NOT NULL,
  key         text NOT NULL,
  level       text NOT NULL CHECK (level IN ('org', 'user', 'agent', 'session')),
  scope_id    text NOT NULL,
  user_id     text,
  agent_id    text,
  session_id  text,
  value       jsonb,
  version     bigint NOT NULL CHECK (version > 0),
  deleted     boolean NOT NULL DEFAULT false,
  expires_at  timestamptz,
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL,
  updated_by  text NOT NULL DEFAULT '',
  PRIMARY KEY (org_id, namespace, key, level, scope_id),
  CHECK ((level = 'org') = (scope_id = '')),
  CHECK (deleted OR value IS NOT NULL)
);
SELECT strata_enable_rls('kv_entries');
-- Listing a namespace for one scope, in key order (cursor = last key).
CREATE INDEX kv_entries_scope ON kv_entries (org_id, namespace, level, scope_id, key);
-- Erasure and export by data subject.
CREATE INDEX kv_entries_user ON kv_entries (org_id, user_id) WHERE user_id IS NOT NULL;
-- Eviction of expired entries.
CREATE INDEX kv_entries_expires ON kv_entries (expires_at) WHERE expires_at IS NOT NULL;

-- Every version ever written: put, restore (a new write copying an old value) and delete.
CREATE TABLE kv_versions (
  org_id        text NOT NULL CHECK (org_id <> ''),
  namespace     text NOT NULL,
  key           text NOT NULL,
  level         text NOT NULL CHECK (level IN ('org', 'user', 'agent', 'session')),
  scope_id      text NOT NULL,
  version       bigint NOT NULL CHECK (version > 0),
  op            text NOT NULL CHECK (op IN ('put', 'restore', 'delete')),
  value         jsonb,
  user_id       text,
  agent_id      text,
  session_id    text,
  expires_at    timestamptz,
  restored_from bigint,
  written_by    text NOT NULL DEFAULT '',
  written_at    timestamptz NOT NULL,
  PRIMARY KEY (org_id, namespace, key, level, scope_id, version),
  CHECK ((op = 'delete') = (value IS NULL))
);
SELECT strata_enable_rls('kv_versions');
CREATE INDEX kv_versions_user ON kv_versions (org_id, user_id) WHERE user_id IS NOT NULL;
