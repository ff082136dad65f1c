-- Steps in run order (issue 46 item 4): when a step was first claimed, kept across retries,
-- takeovers and handoffs (started_at is the current attempt's). Lists of a job's steps (the
-- API, the SDKs, the console) read them in this order, then by id.
ALTER TABLE job_steps ADD COLUMN first_started_at timestamptz;
-- The backfill reads every org's rows: row-level security is lifted for it, as 0030 does.
ALTER TABLE job_steps NO FORCE ROW LEVEL SECURITY;
ALTER TABLE job_step_attempts NO FORCE ROW LEVEL SECURITY;
UPDATE job_steps s SET first_started_at = coalesce(
  (SELECT min(a.acquired_at) FROM job_step_attempts a
    WHERE a.org_id = s.org_id AND a.job_id = s.job_id AND a.step_id = s.step_id),
  s.started_at);
ALTER TABLE job_steps FORCE ROW LEVEL SECURITY;
ALTER TABLE job_step_attempts FORCE ROW LEVEL SECURITY;
ALTER TABLE job_steps ALTER COLUMN first_started_at SET DEFAULT now(),
  ALTER COLUMN first_started_at SET NOT NULL;
CREATE INDEX job_steps_run_order ON job_steps (org_id, job_id, first_started_at, step_id);
