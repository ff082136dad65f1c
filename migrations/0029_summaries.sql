-- Rolling summaries (issue 21, docs/summaries.md): what fell out of a session's turn buffer,
-- and what lies beyond the newest events of a long job's log, summarised so the context of
-- the next turn stays inside its budget without losing what happened. internal/summaries
-- owns the table; internal/consolidation (Rolling) writes it from a River job.

-- Every summary of a subject (a session or a job) is a new version: it covers the seqs
-- from_seq..to_seq (a rolling summary folds the previous version and the seqs after it, so
-- from_seq stays where the first version began) and added_from is the first seq this
-- version added. Versions are never updated; history is kept until erasure.
-- summarizer is "extractive" or "llm:<model>"; prompt_version names the prompt an LLM was
-- given; fallback says why an LLM summary fell back to the extractive one.
CREATE TABLE summaries (
  org_id         text NOT NULL CHECK (org_id <> ''),
  subject_kind   text NOT NULL CHECK (subject_kind IN ('session', 'job')),
  subject_id     text NOT NULL CHECK (subject_id <> ''),
  version        bigint NOT NULL CHECK (version > 0),
  user_id        text,
  agent_id       text,
  from_seq       bigint NOT NULL CHECK (from_seq > 0),
  added_from     bigint NOT NULL CHECK (added_from >= from_seq),
  to_seq         bigint NOT NULL CHECK (to_seq >= added_from),
  items          int NOT NULL CHECK (items >= 0),
  text           text NOT NULL,
  tokens         int NOT NULL CHECK (tokens >= 0),
  summarizer     text NOT NULL,
  prompt_version text,
  fallback       text,
  created_at     timestamptz NOT NULL,
  PRIMARY KEY (org_id, subject_kind, subject_id, version)
);
SELECT strata_enable_rls('summaries');
CREATE INDEX summaries_user ON summaries (org_id, user_id) WHERE user_id IS NOT NULL;

-- Browse (GET /v1/memories, Mem0's get_all): current versions newest first, a keyset on
-- (valid_from, id) within the org.
CREATE INDEX memories_list ON memories (org_id, valid_from DESC, id DESC) WHERE valid_to IS NULL;
