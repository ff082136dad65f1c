-- GDPR (issue 9): erasure requests (Art. 17) with their receipts, restrictions of processing
-- (Art. 18), and rectification (Art. 16) as a first-class key-value history op.
-- docs/compliance.md explains the flows; docs/data-map.md lists every place personal data
-- lives and how erasure and export reach it.

-- One row per erasure request. user_id is the subject while the erasure runs; when it
-- completes the raw id is cleared and only subject (the audit pseudonym, a keyed HMAC) stays,
-- so the receipt proves what was done without keeping the person's id.
-- progress: per-tier counts of what committed steps removed ({"semantic.memories": 12, …});
-- phases_done: the phases finished; lease_*: which worker runs it (a killed worker's lease
-- expires and another takes over); verification: the final re-query of every tier.
CREATE TABLE gdpr_erasures (
  org_id        text NOT NULL CHECK (org_id <> ''),
  id            text NOT NULL,
  user_id       text,
  subject       text NOT NULL,
  status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'completed', 'failed')),
  requested_by  text NOT NULL,
  request_id    text,
  reason        text NOT NULL DEFAULT '',
  requested_at  timestamptz NOT NULL,
  deadline      timestamptz NOT NULL,
  started_at    timestamptz,
  finished_at   timestamptz,
  progress      jsonb NOT NULL DEFAULT '{}',
  phases_done   text[] NOT NULL DEFAULT '{}',
  rounds        int NOT NULL DEFAULT 0,
  attempts      int NOT NULL DEFAULT 0,
  lease_owner   text,
  lease_until   timestamptz,
  enqueued_at   timestamptz,
  verification  jsonb,
  last_error    text,
  PRIMARY KEY (org_id, id),
  CHECK ((status = 'completed') = (finished_at IS NOT NULL)),
  CHECK (status <> 'completed' OR user_id IS NULL)
);
SELECT strata_enable_rls('gdpr_erasures');
CREATE INDEX gdpr_erasures_open ON gdpr_erasures (org_id, lease_until) WHERE status IN ('pending', 'running');
CREATE INDEX gdpr_erasures_subject ON gdpr_erasures (org_id, subject, requested_at);

-- Restriction of processing: while a row exists, the subject's data is kept but excluded from
-- search, context and similar-jobs, and refused on every agent read path.
CREATE TABLE gdpr_restrictions (
  org_id        text NOT NULL CHECK (org_id <> ''),
  user_id       text NOT NULL,
  restricted_at timestamptz NOT NULL,
  restricted_by text NOT NULL,
  reason        text NOT NULL DEFAULT '',
  PRIMARY KEY (org_id, user_id)
);
SELECT strata_enable_rls('gdpr_restrictions');

-- Rectification (Art. 16) is a history op of its own in the key-value tier.
ALTER TABLE kv_versions DROP CONSTRAINT kv_versions_op_check;
ALTER TABLE kv_versions ADD CONSTRAINT kv_versions_op_check CHECK (op IN ('put', 'restore', 'delete', 'rectify'));
