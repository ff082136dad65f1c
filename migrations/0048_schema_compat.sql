-- strata:phase expand
-- The schema's compatibility bookkeeping (docs/operations.md, "How to upgrade"): each
-- migration applied from now on records its phase and, for a contract, the oldest build
-- (named by its newest migration) that may still run on the schema. A server reads these
-- rows at start and refuses to run on a schema contracted past its code.
--
-- Expand only: both columns have a constant default (no table rewrite), so the previous
-- release's migrator, which inserts version, name and checksum alone, keeps working, and
-- rows of files applied before this one read as expand. The table is the migrator's own
-- (internal/pg creates it before the first file), tiny, and holds no org's data.
ALTER TABLE schema_migrations
  ADD COLUMN phase text NOT NULL DEFAULT 'expand',
  ADD COLUMN requires_build int NOT NULL DEFAULT 0;
ALTER TABLE schema_migrations
  ADD CONSTRAINT schema_migrations_phase CHECK (phase IN ('expand', 'contract')) NOT VALID;
ALTER TABLE schema_migrations VALIDATE CONSTRAINT schema_migrations_phase;
