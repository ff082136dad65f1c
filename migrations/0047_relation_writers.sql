-- Every writer of the extraction batch a relation was written from (issue 57 item 2
-- follow-up): created_by_key is one key (the batch's attributed writer), so a quarantine
-- of another writer of the batch made later never matched it. The graph reads leave out a
-- relation any of whose writers is under an active quarantine (graph.notQuarantinedSQL).
-- Expand/contract: nullable, nothing else changes; the previous release's server neither
-- reads nor writes it (its relations have NULL: only created_by_key is matched, as before).
ALTER TABLE graph_relations ADD COLUMN writers text[];

-- The same list on the extraction's provenance rows, so a later quarantine of any writer
-- of a batch finds the preferences the batch wrote (key-value memory has no held state:
-- extraction.Extractor.RevertQuarantined reverts them). Nullable; the previous release
-- leaves it NULL (then only written_by is matched).
ALTER TABLE extraction_provenance ADD COLUMN writers text[];
