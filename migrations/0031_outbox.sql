-- The event outbox (internal/outbox, docs/events.md): every event Strata pushes (webhooks,
-- GET /v1/events/stream) is a row here, inserted in the same transaction as the write that
-- causes it, so an event exists exactly when its write committed.
--
-- Ordering: seq is per org and comes from outbox_heads, whose row for the org an emitting
-- transaction updates (and so locks) as its last statement before COMMIT. Two transactions
-- emitting for one org therefore commit in seq order: a reader that has seen seq N can never
-- later see a smaller seq commit, so "seq > cursor" never skips an event (see docs/events.md).
-- seq may have gaps (a rolled-back transaction, or an emission deduplicated by dedupe_key);
-- it never goes backwards. Payloads hold ids and pseudonyms only, never memory text or
-- personal data.
CREATE TABLE outbox_heads (
  org_id   text NOT NULL CHECK (org_id <> ''),
  last_seq bigint NOT NULL,
  PRIMARY KEY (org_id)
);
SELECT strata_enable_rls('outbox_heads');

CREATE TABLE outbox_events (
  org_id     text NOT NULL CHECK (org_id <> ''),
  seq        bigint NOT NULL,
  id         uuid NOT NULL DEFAULT gen_random_uuid(),
  type       text NOT NULL,
  job_id     text,
  data       jsonb NOT NULL DEFAULT '{}',
  dedupe_key text,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, seq)
);
-- An emission that names a dedupe key happens once (a replayed fail, a stall seen by two
-- replicas).
CREATE UNIQUE INDEX outbox_events_dedupe ON outbox_events (org_id, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX outbox_events_job ON outbox_events (org_id, job_id, seq) WHERE job_id IS NOT NULL;
SELECT strata_enable_rls('outbox_events');

-- strata_outbox_orgs lists the orgs with events (the dispatcher visits them; row-level
-- security would hide them from a worker that has no org yet). Org ids only.
CREATE OR REPLACE FUNCTION strata_outbox_orgs()
  RETURNS TABLE (org_id text, last_seq bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  SELECT org_id, last_seq FROM outbox_heads
$$;
REVOKE ALL ON FUNCTION strata_outbox_orgs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION strata_outbox_orgs() TO strata_app;

-- strata_gdpr_erasures_overdue feeds the strata_gdpr_erasures_overdue gauge: open (or failed)
-- erasures past their deadline, counted across orgs (the scrape has no org); counts only.
CREATE OR REPLACE FUNCTION strata_gdpr_erasures_overdue(at timestamptz)
  RETURNS bigint
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  SELECT count(*) FROM gdpr_erasures WHERE status <> 'completed' AND deadline < at
$$;
REVOKE ALL ON FUNCTION strata_gdpr_erasures_overdue(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION strata_gdpr_erasures_overdue(timestamptz) TO strata_app;
