-- Signed anchors of the audit chain (docs/compliance.md, "Anchors"): now and then, and on
-- demand, the head of each org's chain (last seq, head hash) is signed with the operator's
-- Ed25519 key, whose private half never enters the database. Copies leave Strata through
-- the operator's file sink; these rows are a convenience for GET /v1/audit/anchors and the
-- server's own verify, not the trust root (whoever can write this table can delete rows
-- from it, never forge one).
CREATE TABLE audit_anchors (
  org_id    text NOT NULL CHECK (org_id <> ''),
  id        bigint GENERATED ALWAYS AS IDENTITY,
  seq       bigint NOT NULL,
  head_hash bytea NOT NULL,
  at        timestamptz NOT NULL,
  key_id    text NOT NULL,
  signature bytea NOT NULL,
  PRIMARY KEY (org_id, id)
);
CREATE INDEX audit_anchors_seq ON audit_anchors (org_id, seq);
SELECT strata_enable_rls('audit_anchors');
REVOKE UPDATE ON audit_anchors FROM strata_app;
