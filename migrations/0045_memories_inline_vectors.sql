-- Keep a memory's vector in its row, and leave room on each page for its access updates
-- (issue 42; docs/benchmarks.md, the mem0 row).
--
-- pgvector stores vectors with STORAGE EXTERNAL: once a row passes Postgres's ~2 KB toast
-- threshold its vector moves to the TOAST table, uncompressed. A 384-dim vector is 1,540
-- bytes and a memory row with it ~2,040, so most rows crossed the line, and every row an
-- exact search or a write's near-duplicate check read cost a TOAST index probe and 6 buffer
-- reads more (1,042 buffers for a 152-row scope's vector leg, against 147 inline; 1.2 ms
-- against 0.5 ms). toast_tuple_target = 8160 (its maximum) keeps vectors up to ~1,900
-- dimensions in the row. It applies to rows written from now on; `VACUUM FULL` of a
-- partition brings older rows in.
--
-- fillfactor 70 (was 90): a 2 KB row left no room on its page for the new version of an
-- access-count update (semantic.AccessLog), so about half of them were not HOT and inserted
-- into every index of the table, the HNSW graph included. At 70 a page holds two such rows
-- and room for their next versions. It applies to pages filled from now on.
--
-- Partitioned memories (docs/scaling.md): the options go on each partition, and
-- strata_partition_shadow copies the unpartitioned table's options to the partitions it
-- creates.
DO $$
DECLARE
  t regclass;
BEGIN
  FOR t IN
    SELECT c.oid::regclass FROM pg_class c
    WHERE c.oid = 'memories'::regclass AND c.relkind = 'r'
    UNION ALL
    SELECT i.inhrelid::regclass FROM pg_inherits i WHERE i.inhparent = 'memories'::regclass
  LOOP
    EXECUTE format('ALTER TABLE %s SET (fillfactor = 70, toast_tuple_target = 8160)', t);
  END LOOP;
END $$;
