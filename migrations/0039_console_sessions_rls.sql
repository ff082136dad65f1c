-- console_sessions under forced row-level security, like every other table that holds an
-- org's rows (issue 41, item 6). 0028 left it out because a session is found by its secret's
-- hash before the org is known. Now a request connection (strata_app) sees and writes only
-- its transaction's org's sessions, and the lookups that cannot know the org run through the
-- narrow SECURITY DEFINER functions below, each keyed by what the caller must already hold:
--   strata_console_session(hash, …)     the sign-in cookie's hash → its own session only;
--   strata_console_session_end(hash)    logout of the session whose secret the caller holds;
--   strata_console_sessions_end_key(id) a revoked key's sessions (a live key's: nothing);
--   strata_console_sessions_sweep(…)    deletes expired sessions, returns a count only.
-- Starting a session inserts in a transaction bound to the key's org (internal/auth).
SELECT strata_enable_rls('console_sessions');

-- The functions run as their owner, the role running this file. Forced row-level security
-- binds the owner too unless it is a superuser or BYPASSRLS; this policy lets that role (and
-- so these functions) through, so console sign-in does not depend on the migrating role's
-- attributes. strata_app is not a member of the owner role: the policy never applies to
-- request connections.
DO $$
BEGIN
  EXECUTE format('CREATE POLICY owner_functions ON console_sessions TO %I USING (true) WITH CHECK (true)', current_user);
END $$;

-- The session whose secret hashes to p_hash, if it is live (not expired, not idle since
-- p_idle_before, its key not revoked and still in the session's org; 'root' is the bootstrap
-- key, checked by the server), with its last activity moved to p_now.
CREATE FUNCTION strata_console_session(p_hash bytea, p_now timestamptz, p_idle_before timestamptz)
  RETURNS TABLE (key_id text, org_id text, role text, created_at timestamptz, last_seen_at timestamptz, expires_at timestamptz)
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  WITH hit AS (
    SELECT c.id_hash FROM console_sessions c LEFT JOIN api_keys k ON k.id = c.key_id
    WHERE c.id_hash = p_hash AND c.expires_at > p_now AND c.last_seen_at > p_idle_before
      AND (c.key_id = 'root' OR (k.id IS NOT NULL AND k.revoked_at IS NULL AND k.org_id = c.org_id)))
  UPDATE console_sessions c SET last_seen_at = p_now FROM hit WHERE c.id_hash = hit.id_hash
  RETURNING c.key_id, c.org_id, c.role, c.created_at, c.last_seen_at, c.expires_at
$$;

CREATE FUNCTION strata_console_session_end(p_hash bytea) RETURNS void
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  DELETE FROM console_sessions WHERE id_hash = p_hash
$$;

-- Only a revoked key's sessions: the revoking transaction has set revoked_at already.
CREATE FUNCTION strata_console_sessions_end_key(p_key_id text) RETURNS bigint
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  WITH gone AS (
    DELETE FROM console_sessions c USING api_keys k
    WHERE c.key_id = p_key_id AND k.id = c.key_id AND k.revoked_at IS NOT NULL
    RETURNING 1)
  SELECT count(*) FROM gone
$$;

CREATE FUNCTION strata_console_sessions_sweep(p_now timestamptz, p_idle_before timestamptz) RETURNS bigint
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public AS $$
  WITH gone AS (
    DELETE FROM console_sessions WHERE expires_at <= p_now OR last_seen_at <= p_idle_before
    RETURNING 1)
  SELECT count(*) FROM gone
$$;

REVOKE ALL ON FUNCTION strata_console_session(bytea, timestamptz, timestamptz), strata_console_session_end(bytea),
  strata_console_sessions_end_key(text), strata_console_sessions_sweep(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION strata_console_session(bytea, timestamptz, timestamptz), strata_console_session_end(bytea),
  strata_console_sessions_end_key(text), strata_console_sessions_sweep(timestamptz, timestamptz) TO strata_app;
