-- Every change to a restriction of processing (restrict, lift, erasure's delete, whatever
-- writes it) notifies strata_gdpr_restrictions with the org, when its transaction commits.
-- Each replica keeps the restricted subjects of the orgs it serves in memory while it
-- LISTENs (internal/gdpr/restrictcache.go) and drops an org's set on its notification.
CREATE OR REPLACE FUNCTION strata_notify_restriction() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('strata_gdpr_restrictions', OLD.org_id);
  ELSE
    PERFORM pg_notify('strata_gdpr_restrictions', NEW.org_id);
    IF TG_OP = 'UPDATE' AND OLD.org_id IS DISTINCT FROM NEW.org_id THEN
      PERFORM pg_notify('strata_gdpr_restrictions', OLD.org_id);
    END IF;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER gdpr_restrictions_notify AFTER INSERT OR UPDATE OR DELETE ON gdpr_restrictions
  FOR EACH ROW EXECUTE FUNCTION strata_notify_restriction();
