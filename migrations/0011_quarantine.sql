-- Memory quarantine (issue 12, poisoning controls): an org admin quarantines everything one
-- API key or one agent wrote to semantic memory since a time. Quarantined memory versions
-- are excluded from search, similar-jobs and context while the quarantine is active; a purge
-- removes them in one operation (the quarantine stays active and keeps holding new writes
-- until it is released). See SECURITY.md and docs/semantic.md.

CREATE TABLE memory_quarantines (
  org_id      text NOT NULL CHECK (org_id <> ''),
  id          uuid NOT NULL,
  -- Exactly one of key_id / agent_id names whose writes are held.
  key_id      text NOT NULL DEFAULT '',
  agent_id    text NOT NULL DEFAULT '',
  since       timestamptz NOT NULL,
  reason      text NOT NULL DEFAULT '',
  status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'released')),
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL,
  released_by text,
  released_at timestamptz,
  purged_by   text,
  purged_at   timestamptz,              -- the last purge
  purged      int NOT NULL DEFAULT 0,   -- memory versions removed by purges
  restored    int NOT NULL DEFAULT 0,   -- earlier versions made current again by purges
  CHECK ((key_id <> '') <> (agent_id <> '')),
  PRIMARY KEY (org_id, id)
);
SELECT strata_enable_rls('memory_quarantines');
CREATE INDEX memory_quarantines_active ON memory_quarantines (org_id, created_at) WHERE status = 'active';

-- Which memory versions a quarantine holds (kept after release, for the record).
CREATE TABLE memory_quarantine_items (
  org_id         text NOT NULL CHECK (org_id <> ''),
  quarantine_id  uuid NOT NULL,
  memory_id      uuid NOT NULL,
  PRIMARY KEY (org_id, quarantine_id, memory_id)
);
SELECT strata_enable_rls('memory_quarantine_items');
CREATE INDEX memory_quarantine_items_memory ON memory_quarantine_items (org_id, memory_id);

-- true while an active quarantine holds the version. Search filters on it (a plain column
-- predicate, so exact and HNSW scans apply it like any other filter).
ALTER TABLE memories ADD COLUMN quarantined boolean NOT NULL DEFAULT false;

-- A memory version written while a quarantine is active, by its key or agent, joins it at
-- once: a compromised agent that keeps writing after the quarantine is contained too. The
-- agent of a write is its provenance agent_id, or its scope agent_id when it named none.
-- Writers take the org's quarantine lock shared and quarantine changes take it exclusive,
-- so a write racing a new quarantine is either seen by it or sees it.
CREATE FUNCTION strata_quarantine_new_memory() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  q uuid;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtextextended('strata.quarantine' || chr(31) || NEW.org_id, 0));
  FOR q IN
    SELECT id FROM memory_quarantines
    WHERE org_id = NEW.org_id AND status = 'active' AND NEW.valid_from >= since
      AND ((key_id <> '' AND key_id = NEW.created_by_key)
        OR (agent_id <> '' AND agent_id = coalesce(nullif(NEW.source_agent_id, ''), NEW.agent_id)))
  LOOP
    INSERT INTO memory_quarantine_items (org_id, quarantine_id, memory_id)
    VALUES (NEW.org_id, q, NEW.id) ON CONFLICT DO NOTHING;
    NEW.quarantined := true;
  END LOOP;
  RETURN NEW;
END $$;
CREATE TRIGGER memories_quarantine BEFORE INSERT ON memories
  FOR EACH ROW EXECUTE FUNCTION strata_quarantine_new_memory();
