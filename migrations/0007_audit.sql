-- Audit log: one row per successful write and per compliance action. Append-only (a trigger
-- refuses UPDATE/DELETE/TRUNCATE, except that the chainer fills the chain columns of a row
-- once, and retention may delete when it says so), and hash-chained per org: each chained
-- row's hash covers the previous row's hash, so editing or removing a row breaks the chain
-- from that point (GET /v1/audit/verify). Subjects are stored only as keyed HMACs.

-- Per-database settings that are not tenant data (the audit pseudonymisation key).
CREATE TABLE strata_settings (
  name  text PRIMARY KEY,
  value text NOT NULL
);
INSERT INTO strata_settings (name, value)
VALUES ('audit_hmac_key', encode(sha256((gen_random_uuid()::text || gen_random_uuid()::text || clock_timestamp()::text)::bytea), 'hex'))
ON CONFLICT DO NOTHING;
REVOKE UPDATE, DELETE ON strata_settings FROM strata_app;

CREATE TABLE audit_log (
  org_id       text NOT NULL CHECK (org_id <> ''),
  id           bigint GENERATED ALWAYS AS IDENTITY,
  at           timestamptz NOT NULL DEFAULT now(),
  actor_key_id text NOT NULL,
  actor_role   text NOT NULL,
  agent_id     text,
  action       text NOT NULL,
  entity_type  text NOT NULL,
  entity_id    text,
  request_id   text,
  subject      text,          -- hex HMAC-SHA256 of the data subject's user_id, never the id
  status       int,
  details      jsonb NOT NULL DEFAULT '{}',  -- ids, counts, reasons: never memory content
  seq          bigint,        -- position in the org's chain, set by the chainer
  prev_hash    bytea,
  hash         bytea,
  PRIMARY KEY (org_id, id)
);
CREATE UNIQUE INDEX audit_log_chain ON audit_log (org_id, seq) WHERE seq IS NOT NULL;
CREATE INDEX audit_log_unchained ON audit_log (org_id, id) WHERE hash IS NULL;
CREATE INDEX audit_log_entity ON audit_log (org_id, entity_type, entity_id, id);
CREATE INDEX audit_log_subject ON audit_log (org_id, subject, id) WHERE subject IS NOT NULL;
SELECT strata_enable_rls('audit_log');

-- The head of each org's chain.
CREATE TABLE audit_chain_heads (
  org_id text NOT NULL CHECK (org_id <> ''),
  seq    bigint NOT NULL,
  hash   bytea NOT NULL,
  PRIMARY KEY (org_id)
);
SELECT strata_enable_rls('audit_chain_heads');

CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' OR TG_OP = 'TRUNCATE' THEN
    IF current_setting('strata.audit_retention', true) = 'on' THEN
      RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only' USING ERRCODE = 'insufficient_privilege';
  END IF;
  -- UPDATE: only the chainer's one-time fill of the chain columns.
  IF OLD.hash IS NULL AND NEW.hash IS NOT NULL
     AND (NEW.org_id, NEW.id, NEW.at, NEW.actor_key_id, NEW.actor_role, NEW.agent_id, NEW.action,
          NEW.entity_type, NEW.entity_id, NEW.request_id, NEW.subject, NEW.status, NEW.details)
         IS NOT DISTINCT FROM
         (OLD.org_id, OLD.id, OLD.at, OLD.actor_key_id, OLD.actor_role, OLD.agent_id, OLD.action,
          OLD.entity_type, OLD.entity_id, OLD.request_id, OLD.subject, OLD.status, OLD.details) THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'audit_log is append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
  FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
  FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
