-- LangGraph checkpointer storage (docs/jobs.md, "LangGraph threads"). A LangGraph thread IS
-- a Strata job: every row here hangs off jobs (org_id, job_id) with ON DELETE CASCADE, so
-- deleting the job (deleteThread, retention, erasure of the job) removes the thread's state.
-- The shape follows LangGraph's own Postgres checkpointer (checkpoints, checkpoint_blobs,
-- checkpoint_writes) so the same queries and the same conformance suite apply, with org_id
-- leading every key and row-level security on. Identifiers compare bytewise (COLLATE "C"):
-- checkpoint ids are uuid6 strings whose byte order is their time order, and list/before
-- depend on it.

-- langgraph_checkpoints: one row per (thread, namespace, checkpoint id chosen by LangGraph).
-- checkpoint is LangGraph's checkpoint document without channel_values (those live in
-- langgraph_blobs, one row per channel version); metadata is plain JSON so list filters by
-- containment (@>). job_version links a root-namespace checkpoint to the job_checkpoints
-- version its first put recorded (NULL for subgraph namespaces).
CREATE TABLE langgraph_checkpoints (
  org_id               text NOT NULL CHECK (org_id <> ''),
  job_id               text COLLATE "C" NOT NULL,
  checkpoint_ns        text COLLATE "C" NOT NULL DEFAULT '',
  checkpoint_id        text COLLATE "C" NOT NULL CHECK (checkpoint_id <> ''),
  parent_checkpoint_id text COLLATE "C",
  checkpoint           jsonb NOT NULL,
  metadata             jsonb NOT NULL DEFAULT '{}',
  job_version          bigint,
  user_id              text,
  created_at           timestamptz NOT NULL,
  updated_at           timestamptz NOT NULL,
  PRIMARY KEY (org_id, job_id, checkpoint_ns, checkpoint_id),
  FOREIGN KEY (org_id, job_id) REFERENCES jobs (org_id, job_id) ON DELETE CASCADE
);
-- list across threads, newest first.
CREATE INDEX langgraph_checkpoints_newest ON langgraph_checkpoints (org_id, checkpoint_id DESC);
CREATE INDEX langgraph_checkpoints_user ON langgraph_checkpoints (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('langgraph_checkpoints');

-- langgraph_blobs: a channel's value at one version (LangGraph's checkpoint_blobs). A put
-- sends only the channels whose version changed; unchanged channels are not rewritten, and
-- a checkpoint reads its values by joining its channel_versions here. type 'empty' (blob
-- NULL) marks a channel that has a version but no value.
CREATE TABLE langgraph_blobs (
  org_id        text NOT NULL CHECK (org_id <> ''),
  job_id        text COLLATE "C" NOT NULL,
  checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
  channel       text COLLATE "C" NOT NULL,
  version       text COLLATE "C" NOT NULL,
  type          text NOT NULL,
  blob          bytea,
  user_id       text,
  PRIMARY KEY (org_id, job_id, checkpoint_ns, channel, version),
  FOREIGN KEY (org_id, job_id) REFERENCES jobs (org_id, job_id) ON DELETE CASCADE
);
CREATE INDEX langgraph_blobs_user ON langgraph_blobs (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('langgraph_blobs');

-- langgraph_writes: pending writes of a task against a checkpoint (putWrites). idx is the
-- write's position in the task's batch, or LangGraph's negative index for its special
-- channels (ERROR -1, SCHEDULED -2, INTERRUPT -3, RESUME -4). A repeated write keeps the
-- first value, except a batch made only of special channels, which replaces (as
-- PostgresSaver does). Reads order a checkpoint's writes by (task_path, task_id, idx), the
-- order live execution applies them (LangGraph's writesSortKey; "C" = code point order). No foreign key to the checkpoint: with durability "async" a task's
-- writes may arrive before its checkpoint's put.
CREATE TABLE langgraph_writes (
  org_id        text NOT NULL CHECK (org_id <> ''),
  job_id        text COLLATE "C" NOT NULL,
  checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
  checkpoint_id text COLLATE "C" NOT NULL,
  task_id       text COLLATE "C" NOT NULL,
  idx           int NOT NULL,
  channel       text NOT NULL,
  type          text NOT NULL,
  blob          bytea,
  task_path     text COLLATE "C" NOT NULL DEFAULT '',
  user_id       text,
  created_at    timestamptz NOT NULL,
  PRIMARY KEY (org_id, job_id, checkpoint_ns, checkpoint_id, task_id, idx),
  FOREIGN KEY (org_id, job_id) REFERENCES jobs (org_id, job_id) ON DELETE CASCADE
);
CREATE INDEX langgraph_writes_user ON langgraph_writes (org_id, user_id) WHERE user_id IS NOT NULL;
SELECT strata_enable_rls('langgraph_writes');
