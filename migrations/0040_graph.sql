-- Graph memory (issue 43): entities and the relations between them, bi-temporal.
-- docs/graph.md explains the model; internal/graph owns these tables.
--
-- Scope levels use '' for "not at this level", as memories do. Both tables lead their
-- primary key with org_id and force row-level security. They are not hash-partitioned:
-- migration 0033 partitions the three tables that grow with every request (events,
-- memories, audit), and an org's entities and relations are far fewer than its memories;
-- with org_id first in every key, the online mover (internal/partition) can take them later.

-- An entity: a person, place, organisation, thing or concept the memory is about. `keys`
-- holds the normalised forms (lower case, whitespace collapsed) of its name and aliases:
-- resolution of a name finds the live entity of the same scope whose keys contain it.
-- A merged entity stays as a tombstone (merged_into = the survivor, keys emptied) so ids
-- handed out before the merge still lead somewhere.
CREATE TABLE graph_entities (
  org_id            text NOT NULL CHECK (org_id <> ''),
  id                uuid NOT NULL,
  user_id           text NOT NULL DEFAULT '',
  agent_id          text NOT NULL DEFAULT '',
  session_id        text NOT NULL DEFAULT '',
  name              text NOT NULL CHECK (name <> ''),
  name_key          text NOT NULL CHECK (name_key <> ''),
  type              text NOT NULL DEFAULT '',
  aliases           text[] NOT NULL DEFAULT '{}',
  keys              text[] NOT NULL DEFAULT '{}',
  summary           text NOT NULL DEFAULT '',
  -- The embedding of name + summary, made by the caller, and the space that made it (as
  -- memories record it). No fixed dimension: one schema serves every embedder.
  embedding         vector,
  embedder          text,
  model             text,
  dims              int CHECK (dims > 0),
  -- What full-text search reads: name, aliases and summary, kept by the trigger below.
  search_text       text NOT NULL DEFAULT '',
  tsv               tsvector GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED,
  -- Memories that mentioned the entity (provenance; erasure by memory follows it).
  source_memory_ids uuid[] NOT NULL DEFAULT '{}',
  merged_into       uuid,
  created_at        timestamptz NOT NULL,
  updated_at        timestamptz NOT NULL,
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, merged_into) REFERENCES graph_entities (org_id, id) ON DELETE CASCADE,
  CHECK ((embedding IS NULL) = (dims IS NULL)),
  CHECK (merged_into IS NULL OR merged_into <> id)
);
SELECT strata_enable_rls('graph_entities');

-- search_text follows name, aliases and summary on every write (array_to_string is not
-- immutable, so a generated column cannot do it).
CREATE FUNCTION graph_entities_search_text() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.search_text := concat_ws(' ', NEW.name, array_to_string(NEW.aliases, ' '), NEW.summary);
  RETURN NEW;
END $$;
CREATE TRIGGER graph_entities_search_text BEFORE INSERT OR UPDATE OF name, aliases, summary ON graph_entities
  FOR EACH ROW EXECUTE FUNCTION graph_entities_search_text();

-- One live entity per (scope, normalised name): the backstop of resolution, which takes an
-- advisory lock per scope before it looks.
CREATE UNIQUE INDEX graph_entities_name ON graph_entities (org_id, user_id, agent_id, session_id, name_key)
  WHERE merged_into IS NULL;
-- Name lookups across scopes (search by name, prefix).
CREATE INDEX graph_entities_name_any ON graph_entities (org_id, name_key text_pattern_ops);
-- Alias resolution: keys && the candidate's keys.
CREATE INDEX graph_entities_keys ON graph_entities USING gin (keys);
CREATE INDEX graph_entities_sources ON graph_entities USING gin (source_memory_ids);
CREATE INDEX graph_entities_tsv ON graph_entities USING gin (tsv);
CREATE INDEX graph_entities_merged ON graph_entities (org_id, merged_into) WHERE merged_into IS NOT NULL;
CREATE INDEX graph_entities_user ON graph_entities (org_id, user_id) WHERE user_id <> '';
CREATE INDEX graph_entities_hnsw_384 ON graph_entities USING hnsw ((embedding::vector(384)) vector_cosine_ops)
  WHERE dims = 384 AND merged_into IS NULL;

-- A relation: subject -predicate-> object (another entity, or a literal value), with its
-- provenance and two time axes:
--   valid_from / valid_to       when it was true in the world (valid_to NULL: still true);
--   recorded_at / superseded_at when Strata learned it and when Strata learned it had ended.
-- A relation is in force when both valid_to and superseded_at are NULL. Contradicting a
-- functional relation closes the old row (valid_to, superseded_at, superseded_by) and
-- never deletes it. A row is closed at most once, so the row also answers what Strata
-- believed before it was closed: its valid_to counts only from superseded_at on.
CREATE TABLE graph_relations (
  org_id            text NOT NULL CHECK (org_id <> ''),
  id                uuid NOT NULL,
  user_id           text NOT NULL DEFAULT '',
  agent_id          text NOT NULL DEFAULT '',
  session_id        text NOT NULL DEFAULT '',
  subject_id        uuid NOT NULL,
  predicate         text NOT NULL CHECK (predicate <> ''),
  object_id         uuid,
  object_value      text,
  functional        boolean NOT NULL DEFAULT false,
  fact              text NOT NULL DEFAULT '',
  source_memory_id  uuid,
  source_job_id     text NOT NULL DEFAULT '',
  source_event_seq  bigint,
  -- The writer, as memories record it: the API key, and the agent it acted for (what a
  -- quarantine of a key or an agent selects).
  created_by_key    text NOT NULL DEFAULT '',
  source_agent_id   text NOT NULL DEFAULT '',
  valid_from        timestamptz NOT NULL,
  valid_to          timestamptz,
  recorded_at       timestamptz NOT NULL,
  superseded_at     timestamptz,
  superseded_by     uuid,
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, subject_id) REFERENCES graph_entities (org_id, id) ON DELETE CASCADE,
  FOREIGN KEY (org_id, object_id) REFERENCES graph_entities (org_id, id) ON DELETE CASCADE,
  CHECK ((object_id IS NULL) <> (object_value IS NULL)),
  CHECK (valid_to IS NULL OR valid_to >= valid_from),
  CHECK (superseded_at IS NULL OR superseded_at >= recorded_at)
);
SELECT strata_enable_rls('graph_relations');

-- In force, by subject and predicate: the contradiction check and "about" reads.
CREATE INDEX graph_relations_subject_now ON graph_relations (org_id, subject_id, predicate)
  WHERE valid_to IS NULL AND superseded_at IS NULL;
-- One functional relation in force per (subject, predicate): the backstop of the
-- per-subject row lock AddRelation takes.
CREATE UNIQUE INDEX graph_relations_functional ON graph_relations (org_id, subject_id, predicate)
  WHERE functional AND valid_to IS NULL AND superseded_at IS NULL;
CREATE INDEX graph_relations_object_now ON graph_relations (org_id, object_id)
  WHERE object_id IS NOT NULL AND valid_to IS NULL AND superseded_at IS NULL;
-- Every version, by subject or object: history, as-of reads, merges, cascades.
CREATE INDEX graph_relations_subject ON graph_relations (org_id, subject_id, predicate, recorded_at);
CREATE INDEX graph_relations_object ON graph_relations (org_id, object_id) WHERE object_id IS NOT NULL;
-- Erasure and export by data subject and by source memory.
CREATE INDEX graph_relations_user ON graph_relations (org_id, user_id) WHERE user_id <> '';
CREATE INDEX graph_relations_source ON graph_relations (org_id, source_memory_id) WHERE source_memory_id IS NOT NULL;
