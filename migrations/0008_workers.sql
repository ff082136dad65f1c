-- Consolidation and eviction workers (issue 8): per-org policies, per-job consolidation
-- bookkeeping, and episodic compaction ranges. docs/workers.md explains them.

-- eviction_policies: one policy document per org (memory kinds, working state, episodic
-- retention, checkpoints, consolidation). An org without a row runs on the defaults
-- (internal/eviction.DefaultPolicy). version is the ETag of GET/PUT /v1/admin/policies.
CREATE TABLE eviction_policies (
  org_id      text NOT NULL CHECK (org_id <> ''),
  policy      jsonb NOT NULL CHECK (jsonb_typeof(policy) = 'object'),
  version     bigint NOT NULL CHECK (version > 0),
  updated_at  timestamptz NOT NULL,
  updated_by  text NOT NULL DEFAULT '',
  PRIMARY KEY (org_id)
);
SELECT strata_enable_rls('eviction_policies');

-- job_consolidation: what consolidation did for a finished job. summary_memory_id is the
-- semantic "job" memory written from the job (idempotency: a job is summarised once);
-- compacted_at marks that its episodic log was examined for compaction (once). Ids and
-- counts only.
CREATE TABLE job_consolidation (
  org_id            text NOT NULL CHECK (org_id <> ''),
  job_id            text NOT NULL,
  summary_memory_id uuid,
  summarizer        text,
  summarized_at     timestamptz,
  compacted_at      timestamptz,
  compacted_runs    int NOT NULL DEFAULT 0,
  compacted_events  int NOT NULL DEFAULT 0,
  PRIMARY KEY (org_id, job_id)
);
SELECT strata_enable_rls('job_consolidation');
CREATE INDEX job_consolidation_summary ON job_consolidation (org_id, summary_memory_id) WHERE summary_memory_id IS NOT NULL;

-- episodic_compactions: runs of superseded edits (seq from_seq..to_seq of job_id's own
-- events) that the default read view of the job replaces by its summary event
-- (summary_seq). The raw events stay in episodic_events until retention removes them;
-- GET /v1/jobs/{job}/events?raw=true shows them.
CREATE TABLE episodic_compactions (
  org_id      text NOT NULL CHECK (org_id <> ''),
  job_id      text NOT NULL,
  from_seq    bigint NOT NULL CHECK (from_seq > 0),
  to_seq      bigint NOT NULL,
  summary_seq bigint NOT NULL,
  events      int NOT NULL CHECK (events > 0),
  created_at  timestamptz NOT NULL,
  PRIMARY KEY (org_id, job_id, from_seq),
  CHECK (to_seq >= from_seq AND summary_seq > to_seq)
);
SELECT strata_enable_rls('episodic_compactions');

-- consolidation_state: per org and task, the high-water mark of incremental passes (the
-- near-duplicate merge only compares memories written or changed since its last pass).
CREATE TABLE consolidation_state (
  org_id      text NOT NULL CHECK (org_id <> ''),
  task        text NOT NULL,
  last_run_at timestamptz NOT NULL,
  PRIMARY KEY (org_id, task)
);
SELECT strata_enable_rls('consolidation_state');
