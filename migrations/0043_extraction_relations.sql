-- Graph relations written by conversation-memory extraction (issue 43 item 2,
-- docs/extraction.md): their provenance row names the relation, with the session, the turn
-- seqs, the model and the prompt version, as rows of memories and preferences do. memory_id
-- is then the memory decision the relation came with, if any.
ALTER TABLE extraction_provenance ADD COLUMN relation_id uuid;
CREATE INDEX extraction_provenance_relation ON extraction_provenance (org_id, relation_id)
  WHERE relation_id IS NOT NULL;
