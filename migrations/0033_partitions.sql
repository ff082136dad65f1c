-- Hash partitioning of the big tables by org_id (issue 27, item 3): episodic_events,
-- memories (every version is a row of memories) and audit_log. docs/scaling.md
-- ("Partitioned tables") explains the layout, the setting and the online mover.
--
-- The partition count is STRATA_PARTITIONS (0..1024, default 16), handed to this file by
-- pg.Migrate as the custom setting strata.partitions; 0 leaves the tables unpartitioned.
-- An EMPTY table is converted here, in this transaction. A table that already holds rows
-- is left as it is (with a notice): `server partition` moves it online, in batches, with
-- the same functions this file defines (strata_partition_*), so both paths build the same
-- DDL. The functions copy the table's definition from the catalog (columns, defaults,
-- checks, generated and identity columns, indexes, triggers, grants, row-level security),
-- so a column or index a later migration adds to the old table is carried over too.

-- Progress of the online mover, one row per table (internal/partition): the last primary
-- key copied (its columns as text), how many rows were copied, and the state
-- ('copying' → 'copied' → 'done'). A killed mover resumes from last_key.
CREATE TABLE strata_partition_moves (
  table_name  text PRIMARY KEY,
  partitions  int NOT NULL CHECK (partitions > 0),
  last_key    text[],
  rows_copied bigint NOT NULL DEFAULT 0,
  state       text NOT NULL DEFAULT 'copying' CHECK (state IN ('copying', 'copied', 'done')),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON strata_partition_moves FROM strata_app;

-- The partition count this transaction was asked for (strata.partitions, default 16).
CREATE FUNCTION strata_partition_count() RETURNS int LANGUAGE plpgsql STABLE AS $$
DECLARE
  s text := coalesce(nullif(current_setting('strata.partitions', true), ''), '16');
  n int;
BEGIN
  IF s !~ '^[0-9]{1,4}$' THEN
    RAISE EXCEPTION 'strata.partitions must be an integer 0..1024, got %', s;
  END IF;
  n := s::int;
  IF n > 1024 THEN
    RAISE EXCEPTION 'strata.partitions must be an integer 0..1024, got %', n;
  END IF;
  RETURN n;
END $$;

-- The name a shadow object carries until the swap gives it the original name.
CREATE FUNCTION strata_partition_tmpname(name text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF length(name) > 59 THEN
    RAISE EXCEPTION 'strata_partition: name % is too long to carry a suffix', name;
  END IF;
  RETURN name || '_sh';
END $$;

-- Columns that an INSERT may name (not generated), in table order, as a quoted list.
CREATE FUNCTION strata_partition_columns(tbl regclass, for_update boolean) RETURNS text[]
  LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(quote_ident(attname) ORDER BY attnum), '{}')
  FROM pg_attribute
  WHERE attrelid = tbl AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
    AND (NOT for_update OR attidentity <> 'a')
$$;

-- The primary key's columns of tbl, quoted, in key order.
CREATE FUNCTION strata_partition_key(tbl regclass) RETURNS text[] LANGUAGE sql STABLE AS $$
  SELECT array_agg(quote_ident(a.attname) ORDER BY k.ord)
  FROM pg_index i
  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
  WHERE i.indrelid = tbl AND i.indisprimary
$$;

-- strata_partition_shadow creates <base>_partitioned: src's columns, defaults, checks,
-- generated and identity columns, PARTITION BY HASH (org_id) with n partitions named
-- <base>_p0 … <base>_p<n-1> (src's storage parameters on each), and every index of src
-- under a temporary name. No triggers, no row-level security and no grants yet: the mover
-- fills it as the owner, and strata_partition_swap adds them when it takes src's place.
CREATE FUNCTION strata_partition_shadow(src regclass, base text, n int) RETURNS void
  LANGUAGE plpgsql AS $$
DECLARE
  dst text := base || '_partitioned';
  r record;
  opts text;
  i int;
BEGIN
  IF n < 1 OR n > 1024 THEN
    RAISE EXCEPTION 'strata_partition_shadow: partition count % is outside 1..1024', n;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_constraint WHERE confrelid = src AND contype = 'f') THEN
    RAISE EXCEPTION 'strata_partition_shadow: % is referenced by a foreign key', src;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_depend d JOIN pg_rewrite rw ON rw.oid = d.objid
             WHERE d.refobjid = src AND d.classid = 'pg_rewrite'::regclass AND rw.ev_class <> src) THEN
    RAISE EXCEPTION 'strata_partition_shadow: a view depends on %', src;
  END IF;
  EXECUTE format('CREATE TABLE %I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED '
    'INCLUDING IDENTITY INCLUDING STATISTICS INCLUDING COMMENTS INCLUDING STORAGE INCLUDING COMPRESSION) '
    'PARTITION BY HASH (org_id)', dst, src);
  SELECT array_to_string(reloptions, ', ') INTO opts FROM pg_class WHERE oid = src;
  FOR i IN 0 .. n - 1 LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES WITH (MODULUS %s, REMAINDER %s)%s',
      base || '_p' || i, dst, n, i, CASE WHEN opts IS NULL OR opts = '' THEN '' ELSE ' WITH (' || opts || ')' END);
  END LOOP;
  -- Indexes: constraint-backed ones (primary key, unique constraints) as constraints, the
  -- rest from their definitions. Every unique one leads with org_id, the partition key.
  FOR r IN
    SELECT ic.relname AS name, pg_get_indexdef(i.indexrelid) AS def, c.conname, pg_get_constraintdef(c.oid) AS condef
    FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
    LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = src AND c.contype IN ('p', 'u', 'x')
    WHERE i.indrelid = src ORDER BY i.indisprimary DESC, ic.relname
  LOOP
    IF r.conname IS NOT NULL THEN
      EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s', dst, strata_partition_tmpname(r.conname), r.condef);
    ELSE
      EXECUTE format('CREATE %sINDEX %I ON %I%s',
        CASE WHEN r.def LIKE 'CREATE UNIQUE INDEX %' THEN 'UNIQUE ' ELSE '' END,
        strata_partition_tmpname(r.name), dst, substring(r.def FROM ' USING .*$'));
    END IF;
  END LOOP;
  EXECUTE format('COMMENT ON TABLE %I IS %L', dst, obj_description(src, 'pg_class'));
  -- Nobody but the owner touches the shadow until it is swapped in.
  EXECUTE format('REVOKE ALL ON %I FROM PUBLIC, strata_app', dst);
  FOR i IN 0 .. n - 1 LOOP
    EXECUTE format('REVOKE ALL ON %I FROM PUBLIC, strata_app', base || '_p' || i);
  END LOOP;
END $$;

-- strata_partition_mirror (an AFTER ROW trigger on the old table while the mover runs)
-- applies each change to the shadow in the same transaction. Arguments: the shadow, the
-- insert column list, the same as ($1).col, the update column list and its ($1).col form,
-- the key columns and their ($2).col form. SECURITY DEFINER: requests run as strata_app,
-- which has no rights on the shadow; the owner writes it (no row-level security on it yet).
CREATE FUNCTION strata_partition_mirror() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    EXECUTE format('INSERT INTO %I (%s) OVERRIDING SYSTEM VALUE SELECT %s ON CONFLICT DO NOTHING',
      TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]) USING NEW, NULL::record;
  ELSIF TG_OP = 'UPDATE' THEN
    EXECUTE format('UPDATE %I SET (%s) = ROW(%s) WHERE (%s) = (%s)',
      TG_ARGV[0], TG_ARGV[3], TG_ARGV[4], TG_ARGV[5], TG_ARGV[6]) USING NEW, OLD;
  ELSIF TG_OP = 'DELETE' THEN
    EXECUTE format('DELETE FROM %I WHERE (%s) = (%s)', TG_ARGV[0], TG_ARGV[5], TG_ARGV[6]) USING NULL::record, OLD;
  ELSIF TG_OP = 'TRUNCATE' THEN
    EXECUTE format('TRUNCATE %I', TG_ARGV[0]);
  END IF;
  RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION strata_partition_mirror() FROM PUBLIC, strata_app;

-- strata_partition_mirror_on installs the mirror triggers on src (idempotent).
CREATE FUNCTION strata_partition_mirror_on(src regclass, base text) RETURNS void
  LANGUAGE plpgsql AS $$
DECLARE
  dst text := base || '_partitioned';
  cols text[] := strata_partition_columns(src, false);
  ucols text[] := strata_partition_columns(src, true);
  keys text[] := strata_partition_key(src);
  args text;
BEGIN
  args := format('%L, %L, %L, %L, %L, %L, %L', dst,
    array_to_string(cols, ', '),
    (SELECT string_agg('($1).' || c, ', ') FROM unnest(cols) c),
    array_to_string(ucols, ', '),
    (SELECT string_agg('($1).' || c, ', ') FROM unnest(ucols) c),
    array_to_string(keys, ', '),
    (SELECT string_agg('($2).' || c, ', ') FROM unnest(keys) c));
  EXECUTE format('DROP TRIGGER IF EXISTS strata_partition_mirror ON %s', src);
  EXECUTE format('DROP TRIGGER IF EXISTS strata_partition_mirror_truncate ON %s', src);
  EXECUTE format('CREATE TRIGGER strata_partition_mirror AFTER INSERT OR UPDATE OR DELETE ON %s '
    'FOR EACH ROW EXECUTE FUNCTION strata_partition_mirror(%s)', src, args);
  EXECUTE format('CREATE TRIGGER strata_partition_mirror_truncate AFTER TRUNCATE ON %s '
    'FOR EACH STATEMENT EXECUTE FUNCTION strata_partition_mirror(%s)', src, args);
END $$;

-- strata_partition_copy_batch copies up to batch rows of src after the recorded last key
-- into the shadow, in primary-key order, and records the new last key in the same
-- transaction (so a killed batch leaves no trace and a rerun starts where it stopped).
-- Rows are read FOR SHARE: a concurrent update waits for the batch, then mirrors onto
-- the copied row. Returns the rows read (0: the copy has caught up).
CREATE FUNCTION strata_partition_copy_batch(src regclass, base text, batch int) RETURNS bigint
  LANGUAGE plpgsql AS $$
DECLARE
  dst text := base || '_partitioned';
  cols text := array_to_string(strata_partition_columns(src, false), ', ');
  keys text[] := strata_partition_key(src);
  keylist text := array_to_string(keys, ', ');
  lk text[];
  cond text := 'true';
  n bigint;
  newkey text[];
BEGIN
  SELECT last_key INTO lk FROM strata_partition_moves WHERE table_name = base FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'strata_partition_copy_batch: no move recorded for %', base;
  END IF;
  IF lk IS NOT NULL THEN
    SELECT format('(%s) > (%s)', keylist, string_agg(format('%L::%s', lk[k.ord], format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY k.ord))
    INTO cond
    FROM pg_index i
    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
    WHERE i.indrelid = src AND i.indisprimary;
  END IF;
  EXECUTE format('WITH b AS (SELECT * FROM %s WHERE %s ORDER BY %s LIMIT %s FOR SHARE), '
    'ins AS (INSERT INTO %I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM b ON CONFLICT DO NOTHING) '
    'SELECT count(*), (SELECT ARRAY[%s] FROM b ORDER BY %s LIMIT 1) FROM b',
    src, cond, keylist, batch, dst, cols, cols,
    (SELECT string_agg(c || '::text', ', ') FROM unnest(keys) c),
    (SELECT string_agg(c || ' DESC', ', ') FROM unnest(keys) c))
  INTO n, newkey;
  UPDATE strata_partition_moves
  SET last_key = coalesce(newkey, last_key), rows_copied = rows_copied + n,
      state = CASE WHEN n = 0 THEN 'copied' ELSE 'copying' END, updated_at = now()
  WHERE table_name = base;
  RETURN n;
END $$;

-- strata_partition_swap puts the shadow in src's place (call it in a transaction that
-- has locked src ACCESS EXCLUSIVE): drops the mirror, copies what is left, renames src
-- to <base>_unpartitioned_old (its indexes and identity sequences get an _old suffix) or
-- drops it, gives the shadow src's name, index names, triggers, grants, identity
-- sequence positions and forced row-level security (on the parent and every partition;
-- strata_app gets no rights on the partitions: requests use the parent only).
CREATE FUNCTION strata_partition_swap(src regclass, base text, keep_old boolean) RETURNS void
  LANGUAGE plpgsql AS $$
DECLARE
  dst text := base || '_partitioned';
  old text := base || '_unpartitioned_old';
  r record;
  seqsrc text;
  seqdst text;
  seqname text;
  lastv bigint;
  called boolean;
BEGIN
  EXECUTE format('DROP TRIGGER IF EXISTS strata_partition_mirror ON %s', src);
  EXECUTE format('DROP TRIGGER IF EXISTS strata_partition_mirror_truncate ON %s', src);
  IF EXISTS (SELECT 1 FROM strata_partition_moves WHERE table_name = base) THEN
    LOOP
      EXIT WHEN strata_partition_copy_batch(src, base, 10000) = 0;
    END LOOP;
  END IF;
  -- Triggers (not the mirror, not internal ones), recreated on the shadow.
  FOR r IN
    SELECT pg_get_triggerdef(t.oid) AS def FROM pg_trigger t
    WHERE t.tgrelid = src AND NOT t.tgisinternal AND t.tgname NOT LIKE 'strata_partition_mirror%'
    ORDER BY t.tgname
  LOOP
    EXECUTE regexp_replace(r.def, ' ON \S+ ', format(' ON %I ', dst));
  END LOOP;
  -- Grants: what src grants, the shadow grants; the partitions grant nothing.
  EXECUTE format('REVOKE ALL ON %I FROM PUBLIC, strata_app', dst);
  FOR r IN
    SELECT a.privilege_type, a.grantee, a.is_grantable
    FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
    WHERE c.oid = src AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT %s ON %I TO %s%s', r.privilege_type, dst,
      CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r.grantee)) END,
      CASE WHEN r.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
  END LOOP;
  -- Identity sequences continue where src's stopped.
  FOR r IN
    SELECT attname FROM pg_attribute WHERE attrelid = src AND attidentity <> '' AND NOT attisdropped
  LOOP
    seqsrc := pg_get_serial_sequence(src::text, r.attname);
    seqdst := pg_get_serial_sequence(quote_ident(dst), r.attname);
    EXECUTE format('SELECT last_value, is_called FROM %s', seqsrc) INTO lastv, called;
    EXECUTE format('SELECT greatest($1, coalesce(max(%I), 0)) FROM %I', r.attname, dst) INTO lastv USING lastv;
    PERFORM setval(seqdst, greatest(lastv, 1), called OR lastv > 1);
    seqname := (SELECT relname FROM pg_class WHERE oid = seqsrc::regclass);
    EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', seqsrc, left(seqname, 59) || '_old');
    EXECUTE format('ALTER SEQUENCE %s RENAME TO %I', seqdst, seqname);
    EXECUTE format('GRANT USAGE, SELECT ON SEQUENCE %s TO strata_app', seqsrc);
  END LOOP;
  -- src steps aside: its indexes take an _old suffix, it takes the _old name.
  FOR r IN SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid WHERE i.indrelid = src LOOP
    EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname, left(r.relname, 59) || '_old');
  END LOOP;
  EXECUTE format('ALTER TABLE %s RENAME TO %I', src, old);
  EXECUTE format('ALTER TABLE %I RENAME TO %I', dst, base);
  FOR r IN
    SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
    WHERE i.indrelid = base::regclass AND ic.relname LIKE '%\_sh'
  LOOP
    EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname, left(r.relname, length(r.relname) - 3));
  END LOOP;
  PERFORM strata_enable_rls(base::regclass);
  FOR r IN SELECT inhrelid::regclass AS part FROM pg_inherits WHERE inhparent = base::regclass LOOP
    PERFORM strata_enable_rls(r.part);
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC, strata_app', r.part);
  END LOOP;
  IF NOT keep_old THEN
    EXECUTE format('DROP TABLE %I', old);
  END IF;
  UPDATE strata_partition_moves SET state = 'done', updated_at = now() WHERE table_name = base;
END $$;

-- Only the owner (the migration, the mover) runs these.
REVOKE ALL ON FUNCTION strata_partition_count(), strata_partition_tmpname(text),
  strata_partition_columns(regclass, boolean), strata_partition_key(regclass),
  strata_partition_shadow(regclass, text, int), strata_partition_mirror_on(regclass, text),
  strata_partition_copy_batch(regclass, text, int), strata_partition_swap(regclass, text, boolean)
  FROM PUBLIC, strata_app;

-- The conversion itself: each empty table now, the others left to `server partition`.
DO $$
DECLARE
  n int := strata_partition_count();
  t text;
  nonempty boolean;
BEGIN
  INSERT INTO strata_settings (name, value) VALUES ('partitions', n::text)
  ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
  IF n = 0 THEN
    RETURN;
  END IF;
  FOREACH t IN ARRAY ARRAY['episodic_events', 'memories', 'audit_log'] LOOP
    -- The owner is bound by the forced row-level security too: lift it for this look (the
    -- lock is held to the end of the transaction, so nothing can slip in).
    EXECUTE format('ALTER TABLE %I NO FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', t) INTO nonempty;
    IF nonempty THEN
      EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
      RAISE NOTICE '% holds rows: it stays unpartitioned until `server partition` moves it online', t;
      CONTINUE;
    END IF;
    PERFORM strata_partition_shadow(t::regclass, t, n);
    PERFORM strata_partition_swap(t::regclass, t, false);
  END LOOP;
END $$;
