-- Conversation memory (issue 21): facts and preferences extracted from a session's turns by
-- the org's LLM (internal/extraction, docs/extraction.md).

-- Who appended each turn (the API key), so what extraction writes from a turn is attributed
-- to that key and a quarantine by key covers it.
ALTER TABLE working_turns ADD COLUMN written_by text;

-- One row per session of an org with extraction on. An append raises pending_seq and
-- last_turn_at in its COMMIT's round trip (the outbox: nothing else happens on the request
-- path); the dispatcher queues a River job for each session whose turns wait longer than the
-- debounce or number every_turns. extracted_seq is the cursor: every turn at or below it has
-- been extracted, and it advances in the same transaction as the decisions it applied, so a
-- crash never leaves half a decision set and no turn is extracted twice.
-- status/last_error/failures make a failing session visible; retry_after backs it off.
CREATE TABLE extraction_state (
  org_id        text NOT NULL CHECK (org_id <> ''),
  session_id    text NOT NULL,
  user_id       text,
  agent_id      text,
  pending_seq   bigint NOT NULL DEFAULT 0,
  last_turn_at  timestamptz,
  extracted_seq bigint NOT NULL DEFAULT 0,
  retry_after   timestamptz,
  status        text NOT NULL DEFAULT 'idle'
                CHECK (status IN ('idle', 'extracted', 'failed', 'restricted', 'rate_limited')),
  runs          bigint NOT NULL DEFAULT 0,
  failures      int NOT NULL DEFAULT 0,
  last_error    text,
  last_run_at   timestamptz,
  updated_at    timestamptz NOT NULL,
  PRIMARY KEY (org_id, session_id)
);
SELECT strata_enable_rls('extraction_state');
CREATE INDEX extraction_state_user ON extraction_state (org_id, user_id);
CREATE INDEX extraction_state_pending ON extraction_state (org_id, last_turn_at) WHERE pending_seq > extracted_seq;

-- Where each extracted memory version or preference version came from: the session and the
-- turn seqs, the model, the prompt version, the decision, and the key that wrote the turns.
-- No content: the text lives in the memory / key-value version it points to.
CREATE TABLE extraction_provenance (
  org_id         text NOT NULL CHECK (org_id <> ''),
  id             bigint GENERATED ALWAYS AS IDENTITY,
  op             text NOT NULL CHECK (op IN ('add', 'update', 'delete')),
  memory_id      uuid,
  kv_namespace   text,
  kv_key         text,
  kv_version     bigint,
  user_id        text,
  agent_id       text,
  session_id     text,
  turn_seqs      bigint[] NOT NULL DEFAULT '{}',
  model          text NOT NULL,
  prompt_version text NOT NULL,
  written_by     text,
  created_at     timestamptz NOT NULL,
  PRIMARY KEY (org_id, id)
);
SELECT strata_enable_rls('extraction_provenance');
CREATE INDEX extraction_provenance_memory ON extraction_provenance (org_id, memory_id);
CREATE INDEX extraction_provenance_user ON extraction_provenance (org_id, user_id);

-- LLM calls and tokens per org and hour (the per-org limits of the extraction policy).
CREATE TABLE extraction_usage (
  org_id  text NOT NULL CHECK (org_id <> ''),
  hour    timestamptz NOT NULL,
  calls   int NOT NULL DEFAULT 0,
  tokens  bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (org_id, hour)
);
SELECT strata_enable_rls('extraction_usage');
