-- Every attempt of a step kept (issue 25 item 1; internal/jobs, docs/jobs.md "Attempts").
-- job_steps holds a step's current claim; job_step_attempts keeps one row per claim: who held
-- it (owner), under which fencing token, the lease (acquired, expires, released), the input
-- the caller recorded, how many heartbeats it sent, and how it ended: completed, failed (error
-- and disposition), lease_lost (its lease ran out and the step was claimed again), taken_over
-- (a handoff moved the lease to another owner while it was live). An open attempt (outcome
-- NULL) is the step's current claim. The fencing token names the attempt: every claim of a
-- step gets a greater one, so (org, job, step, token) is the key and token order is time order.
-- Rows are written by the same statements that write job_steps (data-modifying CTEs), go with
-- their step (and so with their job: GDPR erasure), and are pruned by the org's policy
-- (steps.keep_attempts, internal/eviction).
CREATE TABLE job_step_attempts (
  org_id            text NOT NULL CHECK (org_id <> ''),
  job_id            text NOT NULL,
  step_id           text NOT NULL,
  fencing_token     bigint NOT NULL CHECK (fencing_token > 0),
  attempt           int NOT NULL CHECK (attempt > 0),
  claim             text NOT NULL CHECK (claim IN ('new', 'retry', 'takeover', 'handoff')),
  owner             text NOT NULL,
  input             jsonb NOT NULL DEFAULT '{}',
  lease_seconds     int NOT NULL CHECK (lease_seconds > 0),
  acquired_at       timestamptz NOT NULL,
  lease_expires_at  timestamptz NOT NULL,
  heartbeats        int NOT NULL DEFAULT 0,
  last_heartbeat_at timestamptz,
  released_at       timestamptz,
  outcome           text CHECK (outcome IN ('completed', 'failed', 'lease_lost', 'taken_over')),
  error             text,
  disposition       text CHECK (disposition IN ('retryable', 'manual_review')),
  PRIMARY KEY (org_id, job_id, step_id, fencing_token),
  CHECK ((outcome IS NULL) = (released_at IS NULL)),
  CHECK ((outcome = 'failed') = (disposition IS NOT NULL)),
  FOREIGN KEY (org_id, job_id, step_id) REFERENCES job_steps (org_id, job_id, step_id) ON DELETE CASCADE
);

-- Steps that already exist keep their current claim as their one known attempt (earlier ones
-- were never recorded). The migration's role owns the tables; forced row-level security would
-- hide every org's rows from it, so it is lifted on job_steps for this transaction only, and
-- the new table gets its security after the copy.
ALTER TABLE job_steps NO FORCE ROW LEVEL SECURITY;
INSERT INTO job_step_attempts (org_id, job_id, step_id, fencing_token, attempt, claim, owner, input, lease_seconds,
    acquired_at, lease_expires_at, last_heartbeat_at, released_at, outcome, error, disposition)
SELECT org_id, job_id, step_id, fencing_token, attempts, CASE WHEN attempts = 1 THEN 'new' ELSE 'retry' END, owner, input,
    lease_seconds, started_at, lease_expires_at, heartbeat_at, finished_at,
    CASE status WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'failed' END,
    error, CASE WHEN status = 'failed' THEN disposition END
FROM job_steps;
ALTER TABLE job_steps FORCE ROW LEVEL SECURITY;
SELECT strata_enable_rls('job_step_attempts');

-- A job's forks (GET /v1/jobs?parent_job_id=, the console's timeline), in job_id order: the
-- index answers the filter and the order, so a page of forks reads only forks. It also
-- serves the parent foreign key's checks, so it replaces jobs_parent (org_id, parent_job_id).
CREATE INDEX jobs_forks ON jobs (org_id, parent_job_id, job_id) WHERE parent_job_id IS NOT NULL;
DROP INDEX jobs_parent;
