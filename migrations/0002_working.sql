-- Working memory: the durable copy of each session's state document and its turn log.
-- Redis holds the live copy (internal/working); these tables are written through in the
-- same transaction as the request, so an acknowledged write is here before the client
-- hears about it, and a Redis flush or restart is recovered from here.

-- One row per (org, session). A deleted session keeps its row as a tombstone (state,
-- user_id and agent_id cleared, deleted_at set) so that versions and turn sequence numbers
-- continue where they were: a stale ETag can never match a recreated session.
CREATE TABLE working_sessions (
  org_id      text NOT NULL CHECK (org_id <> ''),
  session_id  text NOT NULL,
  user_id     text,
  agent_id    text,
  state       jsonb CHECK (state IS NULL OR jsonb_typeof(state) = 'object'),
  version     bigint NOT NULL DEFAULT 0 CHECK (version >= 0),
  turn_seq    bigint NOT NULL DEFAULT 0 CHECK (turn_seq >= 0),
  ttl_ms      bigint NOT NULL CHECK (ttl_ms > 0),
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  deleted_at  timestamptz,
  PRIMARY KEY (org_id, session_id)
);
SELECT strata_enable_rls('working_sessions');
CREATE INDEX working_sessions_user ON working_sessions (org_id, user_id) WHERE user_id IS NOT NULL;
CREATE INDEX working_sessions_expires ON working_sessions (expires_at);

-- Every turn posted to a session, keyed by its sequence number (assigned by Redis, unique
-- and increasing per session). The Redis buffer holds the newest N; older turns live only
-- here. Inserts are ON CONFLICT DO NOTHING, so re-spilling after a crash never duplicates.
CREATE TABLE working_turns (
  org_id      text NOT NULL CHECK (org_id <> ''),
  session_id  text NOT NULL,
  seq         bigint NOT NULL CHECK (seq > 0),
  user_id     text,
  role        text NOT NULL,
  content     text NOT NULL,
  metadata    jsonb,
  created_at  timestamptz NOT NULL,
  PRIMARY KEY (org_id, session_id, seq)
);
SELECT strata_enable_rls('working_turns');
CREATE INDEX working_turns_user ON working_turns (org_id, user_id) WHERE user_id IS NOT NULL;
