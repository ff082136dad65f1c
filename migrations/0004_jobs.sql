-- Durable jobs: the job record, its checkpoint history, leased steps with fencing tokens,
-- acknowledged handoffs, and the completion outbox. docs/jobs.md explains the protocol.

-- jobs: one row per job. version is the record's own version (ETag of PUT/GET /v1/jobs/{job});
-- checkpoint_version is the job's latest checkpoint version (0: none yet). A fork names its
-- parent, the checkpoint version it branched at and the parent's event seq at that checkpoint;
-- its checkpoint versions continue after parent_version and versions <= parent_version are
-- read from the parent (nothing is copied). progress_at moves on every step start, heartbeat,
-- completion, failure, checkpoint and handoff ack: "no progress for STRATA_STALLED_AFTER".
CREATE TABLE jobs (
  org_id             text NOT NULL CHECK (org_id <> ''),
  job_id             text NOT NULL,
  version            bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  goal               text NOT NULL DEFAULT '',
  status             text NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
  owner              text NOT NULL DEFAULT '',
  user_id            text,
  agent_id           text,
  session_id         text,
  metadata           jsonb NOT NULL DEFAULT '{}',
  outcome            jsonb,
  checkpoint_version bigint NOT NULL DEFAULT 0 CHECK (checkpoint_version >= 0),
  parent_job_id      text,
  parent_version     bigint,
  parent_event_seq   bigint,
  progress_at        timestamptz NOT NULL,
  created_at         timestamptz NOT NULL,
  updated_at         timestamptz NOT NULL,
  finished_at        timestamptz,
  PRIMARY KEY (org_id, job_id),
  CHECK ((parent_job_id IS NULL) = (parent_version IS NULL)),
  CHECK (parent_version IS NULL OR checkpoint_version >= parent_version),
  CHECK ((status = 'running') = (finished_at IS NULL)),
  FOREIGN KEY (org_id, parent_job_id) REFERENCES jobs (org_id, job_id)
);
-- GET /v1/jobs?status=… pages by job_id within a status; the stalled scan starts here too.
CREATE INDEX jobs_status ON jobs (org_id, status, job_id);
CREATE INDEX jobs_progress ON jobs (org_id, progress_at) WHERE status = 'running';
CREATE INDEX jobs_parent ON jobs (org_id, parent_job_id) WHERE parent_job_id IS NOT NULL;
CREATE INDEX jobs_user ON jobs (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('jobs');

-- job_checkpoints: every checkpoint version of a job (time travel). event_seq is the job's
-- episodic last seq when the checkpoint was written (a fork shares the events up to it).
CREATE TABLE job_checkpoints (
  org_id        text NOT NULL CHECK (org_id <> ''),
  job_id        text NOT NULL,
  version       bigint NOT NULL CHECK (version > 0),
  goal          text NOT NULL DEFAULT '',
  current_step  text NOT NULL DEFAULT '',
  done          jsonb NOT NULL DEFAULT '[]',
  pending       jsonb NOT NULL DEFAULT '[]',
  next_action   text NOT NULL DEFAULT '',
  state         jsonb NOT NULL DEFAULT '{}',
  working_state jsonb,
  event_seq     bigint NOT NULL DEFAULT 0 CHECK (event_seq >= 0),
  agent_id      text,
  user_id       text,
  created_at    timestamptz NOT NULL,
  PRIMARY KEY (org_id, job_id, version),
  FOREIGN KEY (org_id, job_id) REFERENCES jobs (org_id, job_id) ON DELETE CASCADE
);
CREATE INDEX job_checkpoints_user ON job_checkpoints (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('job_checkpoints');

-- job_steps: one row per step of a job, the lease and its fencing token.
--   status running   : claimed by owner until lease_expires_at (expired: may be taken over)
--   status completed : result stored; start answers it and claims nothing
--   status failed    : disposition retryable (start claims again) or manual_review (start is
--                      refused until an operator clears it: cleared_at set, disposition
--                      becomes retryable)
-- fencing_token only grows (one more per claim), so a token names exactly one claim.
CREATE TABLE job_steps (
  org_id           text NOT NULL CHECK (org_id <> ''),
  job_id           text NOT NULL,
  step_id          text NOT NULL,
  status           text NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
  owner            text NOT NULL,
  fencing_token    bigint NOT NULL CHECK (fencing_token > 0),
  attempts         int NOT NULL CHECK (attempts > 0),
  lease_seconds    int NOT NULL CHECK (lease_seconds > 0),
  input            jsonb NOT NULL DEFAULT '{}',
  result           jsonb,
  error            text,
  disposition      text CHECK (disposition IN ('retryable', 'manual_review')),
  lease_expires_at timestamptz NOT NULL,
  started_at       timestamptz NOT NULL,
  heartbeat_at     timestamptz NOT NULL,
  finished_at      timestamptz,
  cleared_at       timestamptz,
  cleared_by       text,
  PRIMARY KEY (org_id, job_id, step_id),
  CHECK ((status = 'failed') = (disposition IS NOT NULL)),
  CHECK ((status = 'running') = (finished_at IS NULL)),
  FOREIGN KEY (org_id, job_id) REFERENCES jobs (org_id, job_id) ON DELETE CASCADE
);
-- in-flight steps by lease expiry: the stalled scan.
CREATE INDEX job_steps_running ON job_steps (org_id, lease_expires_at) WHERE status = 'running';
SELECT strata_enable_rls('job_steps');

-- job_handoffs: at most one pending handoff per job (the partial unique index). Ack moves the
-- job's owner in the same transaction.
CREATE TABLE job_handoffs (
  org_id       text NOT NULL CHECK (org_id <> ''),
  job_id       text NOT NULL,
  handoff_id   text NOT NULL,
  from_agent   text NOT NULL,
  to_agent     text NOT NULL,
  context      jsonb NOT NULL DEFAULT '{}',
  status       text NOT NULL CHECK (status IN ('pending', 'acknowledged')),
  sent_count   int NOT NULL DEFAULT 1 CHECK (sent_count > 0),
  created_at   timestamptz NOT NULL,
  last_sent_at timestamptz NOT NULL,
  acked_at     timestamptz,
  PRIMARY KEY (org_id, job_id, handoff_id),
  CHECK ((status = 'acknowledged') = (acked_at IS NOT NULL)),
  FOREIGN KEY (org_id, job_id) REFERENCES jobs (org_id, job_id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX job_handoffs_one_pending ON job_handoffs (org_id, job_id) WHERE status = 'pending';
SELECT strata_enable_rls('job_handoffs');

-- job_outbox: work the completion of a job enqueues, written in the completion's own
-- transaction (the transactional outbox). The contract for its consumer (the workers tier):
--   kind       'consolidate_job' (the only kind so far): summarise the finished job into a
--              semantic "job" memory;
--   payload    {"job_id", "status", "outcome", "checkpoint_version", "event_seq"};
--   one row per (org, job, kind): completing twice enqueues once;
--   a consumer claims rows with SELECT … WHERE processed_at IS NULL ORDER BY id
--   FOR UPDATE SKIP LOCKED, does the work, then sets processed_at (or bumps attempts and
--   last_error); rows are never deleted by the API.
CREATE TABLE job_outbox (
  org_id       text NOT NULL CHECK (org_id <> ''),
  id           bigint GENERATED ALWAYS AS IDENTITY,
  job_id       text NOT NULL,
  kind         text NOT NULL CHECK (kind IN ('consolidate_job')),
  payload      jsonb NOT NULL,
  user_id      text,
  created_at   timestamptz NOT NULL,
  attempts     int NOT NULL DEFAULT 0,
  last_error   text,
  processed_at timestamptz,
  PRIMARY KEY (org_id, id),
  UNIQUE (org_id, job_id, kind)
);
CREATE INDEX job_outbox_unprocessed ON job_outbox (id) WHERE processed_at IS NULL;
SELECT strata_enable_rls('job_outbox');

-- jobs_stalled_counts feeds the strata_jobs_stalled metric: counts only, across orgs (the
-- scrape has no org), so it runs as the owner and returns no row data.
CREATE OR REPLACE FUNCTION jobs_stalled_counts(at timestamptz, stalled_after interval)
  RETURNS TABLE (lease_expired bigint, no_progress bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  SELECT
    (SELECT count(DISTINCT (s.org_id, s.job_id)) FROM job_steps s
       JOIN jobs j ON j.org_id = s.org_id AND j.job_id = s.job_id AND j.status = 'running'
       WHERE s.status = 'running' AND s.lease_expires_at < at),
    (SELECT count(*) FROM jobs j WHERE j.status = 'running' AND j.progress_at < at - stalled_after
       AND NOT EXISTS (SELECT 1 FROM job_steps s WHERE s.org_id = j.org_id AND s.job_id = j.job_id
                        AND s.status = 'running' AND s.lease_expires_at < at))
$$;
REVOKE ALL ON FUNCTION jobs_stalled_counts(timestamptz, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_stalled_counts(timestamptz, interval) TO strata_app;
