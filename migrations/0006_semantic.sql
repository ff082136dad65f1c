-- Semantic memory (issue 6): memories with embeddings, provenance, validity interval and
-- version lineage; the retrieval log. See docs/semantic.md.

-- One row per version of a memory. A memory's first version has id = root_id; PATCH with
-- new text inserts version n+1 (same root_id) and closes the old one (valid_to,
-- superseded_by). Scope levels use '' for "not at this level" (as strata.Scope does), so
-- uniqueness and scope lookups need no NULL handling.
CREATE TABLE memories (
  org_id            text NOT NULL CHECK (org_id <> ''),
  id                uuid NOT NULL,
  root_id           uuid NOT NULL,
  version           int NOT NULL DEFAULT 1 CHECK (version >= 1),
  user_id           text NOT NULL DEFAULT '',
  agent_id          text NOT NULL DEFAULT '',
  session_id        text NOT NULL DEFAULT '',
  kind              text NOT NULL CHECK (kind <> ''),
  text              text NOT NULL CHECK (text <> ''),
  -- sha256 of the normalised text (lower-cased, whitespace collapsed): exact-dup key.
  text_hash         bytea NOT NULL,
  tsv               tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
  metadata          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
  importance        real NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
  pinned            boolean NOT NULL DEFAULT false,
  trust             text NOT NULL,
  -- Provenance: the API key that wrote this version, and what the client said produced it.
  created_by_key    text NOT NULL DEFAULT '',
  source_agent_id   text NOT NULL DEFAULT '',
  source_job_id     text NOT NULL DEFAULT '',
  source_event_seq  bigint,
  -- The vector and the embedding space that produced it. The column has no fixed
  -- dimension; each dimension gets its own partial HNSW index on a cast (below), so one
  -- schema serves 384-dim lexical vectors and 1536-dim OpenAI ones.
  embedding         vector NOT NULL,
  embedder          text NOT NULL,
  model             text NOT NULL,
  dims              int NOT NULL CHECK (dims > 0),
  -- Re-embedding target (filled by semantic.Reembed while search serves `embedding`,
  -- then swapped in atomically by renaming the columns).
  embedding_next    vector,
  next_embedder     text,
  next_model        text,
  next_dims         int,
  valid_from        timestamptz NOT NULL,
  valid_to          timestamptz,
  superseded_by     uuid,
  access_count      bigint NOT NULL DEFAULT 0,
  last_accessed_at  timestamptz,
  dedup_count       int NOT NULL DEFAULT 0,
  last_verified_at  timestamptz,
  last_verified_by  text,
  updated_at        timestamptz NOT NULL,
  PRIMARY KEY (org_id, id)
) WITH (fillfactor = 90); -- room for HOT updates of access data
SELECT strata_enable_rls('memories');

-- Exact duplicates: one current row per (scope, normalised text). Writes also take an
-- advisory lock per scope, so near-duplicate checks are serialised; this is the backstop.
CREATE UNIQUE INDEX memories_current_text ON memories (org_id, user_id, agent_id, session_id, text_hash)
  WHERE valid_to IS NULL;
-- Scope lookups: counting a scope (exact vs HNSW choice), exact search of small scopes.
CREATE INDEX memories_scope ON memories (org_id, user_id, agent_id, session_id) INCLUDE (valid_to);
CREATE INDEX memories_lineage ON memories (org_id, root_id, version);
CREATE INDEX memories_tsv ON memories USING gin (tsv);
-- Approximate nearest neighbours for 384-dim vectors (the default). Other dimensions get
-- theirs from semantic.EnsureIndex (the server does it at start when it is the owner).
CREATE INDEX memories_hnsw_384 ON memories USING hnsw ((embedding::vector(384)) vector_cosine_ops)
  WHERE dims = 384;

-- The retrieval log: which memory versions were served to which request (and job,
-- session, key). Ids only, never text. "Which runs used memory X?" reads it by memory_id.
CREATE TABLE memory_retrievals (
  org_id      text NOT NULL CHECK (org_id <> ''),
  id          bigint GENERATED ALWAYS AS IDENTITY,
  memory_id   uuid NOT NULL,
  request_id  text NOT NULL,
  operation   text NOT NULL,
  key_id      text NOT NULL DEFAULT '',
  user_id     text NOT NULL DEFAULT '',
  agent_id    text NOT NULL DEFAULT '',
  session_id  text NOT NULL DEFAULT '',
  job_id      text NOT NULL DEFAULT '',
  rank        int NOT NULL,
  score       real NOT NULL,
  served_at   timestamptz NOT NULL,
  PRIMARY KEY (org_id, id)
);
SELECT strata_enable_rls('memory_retrievals');
CREATE INDEX memory_retrievals_memory ON memory_retrievals (org_id, memory_id, id);
CREATE INDEX memory_retrievals_user ON memory_retrievals (org_id, user_id) WHERE user_id <> '';
