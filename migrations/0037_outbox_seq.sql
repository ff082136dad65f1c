-- Outbox seqs without a head row (issue 25: what events cost the write path). An emission
-- used to update its org's row of outbox_heads, which took a row lock, wrote a new heap
-- tuple and its WAL on every write that emitted. It now takes a transaction-scoped advisory
-- lock keyed on the org (hashtextextended('strata.outbox' || chr(31) || org, 0): a slot in
-- Postgres's shared lock table, no row, no WAL) and draws seq from one sequence, in the same
-- statement as its insert (internal/outbox). The guarantee is the one 0031 gave: the lock is
-- held until the transaction ends, and a transaction releases its locks only once its commit
-- is visible, so of two transactions emitting for one org the second draws its seq after the
-- first has committed (or rolled back) — seqs of an org become visible in increasing order
-- and a reader's "seq > cursor" never skips an event. This needs nextval to grow in time
-- order across sessions: the sequence must keep CACHE 1 (the default).
--
-- Seqs are now unique across orgs, and an org's seqs skip the numbers other orgs drew (they
-- already could skip). The sequence starts above every seq handed out so far, so existing
-- cursors (webhook_cursors, an SSE client's Last-Event-ID) stay valid and nothing is reused.
CREATE SEQUENCE outbox_seq;
SELECT setval('outbox_seq', greatest(
  coalesce((SELECT max(last_seq) FROM outbox_heads), 0),
  coalesce((SELECT max(seq) FROM outbox_events), 0)) + 1, false);

-- The orgs with events, for the dispatcher's periodic full pass: a skip scan of the primary
-- key (one index descent per org, and one for its newest seq) instead of a row per org that
-- every emission had to update. Org ids and numbers only.
CREATE OR REPLACE FUNCTION strata_outbox_orgs()
  RETURNS TABLE (org_id text, last_seq bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  WITH RECURSIVE o(org_id) AS (
    (SELECT e.org_id FROM outbox_events e ORDER BY e.org_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.org_id FROM outbox_events e WHERE e.org_id > o.org_id ORDER BY e.org_id LIMIT 1)
    FROM o WHERE o.org_id IS NOT NULL)
  SELECT o.org_id, (SELECT max(e.seq) FROM outbox_events e WHERE e.org_id = o.org_id)
  FROM o WHERE o.org_id IS NOT NULL
$$;
REVOKE ALL ON FUNCTION strata_outbox_orgs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION strata_outbox_orgs() TO strata_app;

-- A server older than this migration would still number its emissions from outbox_heads,
-- below the sequence, and readers past them would skip them: dropping the table makes such a
-- server's emitting writes fail instead (stop old servers before starting new ones).
DROP TABLE outbox_heads;
