-- Episodic memory: the ordered, append-only edit log of each job, and the asset registry.
-- docs/episodic.md explains the design (seq allocation, forks, fingerprints, partitioning).

-- episodic_jobs is the head of a job's log: the last seq handed out (the per-job counter
-- that appends lock and bump inside their transaction, so seqs are gap-free) and, for a
-- fork, the parent job and the parent seq the fork branches at (the fork's view is the
-- parent's view up to parent_seq followed by its own events; nothing is copied).
-- It is the log's own row, not the job record of the jobs tier (which keeps goal, status,
-- owner in its own table keyed (org_id, job_id)).
CREATE TABLE episodic_jobs (
  org_id         text NOT NULL CHECK (org_id <> ''),
  job_id         text NOT NULL CHECK (job_id <> ''),
  last_seq       bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
  parent_job_id  text,
  parent_seq     bigint CHECK (parent_seq >= 0),
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, job_id),
  CHECK ((parent_job_id IS NULL) = (parent_seq IS NULL)),
  CHECK (parent_seq IS NULL OR last_seq >= parent_seq),
  FOREIGN KEY (org_id, parent_job_id) REFERENCES episodic_jobs (org_id, job_id)
);
CREATE INDEX episodic_jobs_parent ON episodic_jobs (org_id, parent_job_id) WHERE parent_job_id IS NOT NULL;
SELECT strata_enable_rls('episodic_jobs');

-- episodic_events: one row per event. (org_id, job_id, seq) is the primary key and the only
-- index range reads need. Append-only: see the trigger below.
CREATE TABLE episodic_events (
  org_id          text NOT NULL CHECK (org_id <> ''),
  job_id          text NOT NULL,
  seq             bigint NOT NULL CHECK (seq > 0),
  op              text NOT NULL CHECK (op <> ''),
  params          jsonb NOT NULL,
  result          jsonb,
  fingerprint     bytea NOT NULL CHECK (length(fingerprint) = 32),
  agent_id        text,
  user_id         text,
  session_id      text,
  idempotency_key text,
  reverts_seq     bigint CHECK (reverts_seq > 0 AND reverts_seq < seq),
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (org_id, job_id, seq),
  CHECK ((op = 'revert') = (reverts_seq IS NOT NULL))
);
-- "did I already apply exactly this edit?"
CREATE INDEX episodic_events_fingerprint ON episodic_events (org_id, job_id, fingerprint);
-- per-event idempotency keys: one event per key and job.
CREATE UNIQUE INDEX episodic_events_idem ON episodic_events (org_id, job_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
-- one compensating revert per reverted event and job.
CREATE UNIQUE INDEX episodic_events_reverts ON episodic_events (org_id, job_id, reverts_seq)
  WHERE reverts_seq IS NOT NULL;
-- erasure and export find a data subject's events.
CREATE INDEX episodic_events_user ON episodic_events (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('episodic_events');

-- Append-only, enforced in the database: UPDATE, DELETE and TRUNCATE of events are refused
-- unless the transaction has opted in with SET LOCAL strata.allow_event_delete = 'on'
-- (erasure and retention do; nothing else may). This guards against bugs and stray SQL, not
-- against a caller that deliberately sets the flag: the compliance code paths are the only
-- ones that do.
CREATE OR REPLACE FUNCTION episodic_events_append_only() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('strata.allow_event_delete', true), '') = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'episodic_events is append-only: % refused (erasure and retention set strata.allow_event_delete)', TG_OP
    USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER episodic_events_append_only
  BEFORE UPDATE OR DELETE OR TRUNCATE ON episodic_events
  FOR EACH STATEMENT EXECUTE FUNCTION episodic_events_append_only();

-- assets: one stable address per asset with its current version (denormalised from
-- asset_versions for a one-row read).
CREATE TABLE assets (
  org_id      text NOT NULL CHECK (org_id <> ''),
  asset_id    text NOT NULL CHECK (asset_id <> ''),
  version     bigint NOT NULL CHECK (version > 0),
  uri         text NOT NULL,
  media_type  text NOT NULL DEFAULT '',
  sha256      text NOT NULL DEFAULT '',
  metadata    jsonb NOT NULL DEFAULT '{}',
  job_id      text,
  event_seq   bigint,
  user_id     text,
  agent_id    text,
  session_id  text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, asset_id)
);
CREATE INDEX assets_user ON assets (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('assets');

-- asset_versions: the lineage. Every version names its parent (NULL for the first) and the
-- job event that produced it, if any.
CREATE TABLE asset_versions (
  org_id          text NOT NULL CHECK (org_id <> ''),
  asset_id        text NOT NULL,
  version         bigint NOT NULL CHECK (version > 0),
  parent_version  bigint CHECK (parent_version > 0 AND parent_version < version),
  uri             text NOT NULL,
  media_type      text NOT NULL DEFAULT '',
  sha256          text NOT NULL DEFAULT '',
  metadata        jsonb NOT NULL DEFAULT '{}',
  job_id          text,
  event_seq       bigint,
  user_id         text,
  agent_id        text,
  session_id      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, asset_id, version),
  FOREIGN KEY (org_id, asset_id) REFERENCES assets (org_id, asset_id) ON DELETE CASCADE,
  CHECK ((job_id IS NULL) = (event_seq IS NULL))
);
CREATE INDEX asset_versions_event ON asset_versions (org_id, job_id, event_seq) WHERE job_id IS NOT NULL;
CREATE INDEX asset_versions_user ON asset_versions (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('asset_versions');
