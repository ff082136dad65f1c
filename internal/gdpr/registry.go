package gdpr

// Coverage says how erasure and export reach one table that can hold a data subject. Every
// table with a user_id column must be listed (TestGDPRCoverageRegistry compares this list
// with information_schema), and docs/data-map.md documents each.
type Coverage struct {
	Table   string
	Tier    string
	Erasure string // what erasure does to the subject's rows
	// Remaining counts the subject's rows left ($1 org, $2 user) for the verification pass;
	// empty means `user_id = $2`.
	Remaining string
}

// Covered is the registry of tables that hold personal data through a user_id column.
var Covered = []Coverage{
	{Table: "working_sessions", Tier: "working", Erasure: "state, user and agent cleared; the row stays as a tombstone naming no one (versions keep growing)"},
	{Table: "working_turns", Tier: "working", Erasure: "deleted"},
	{Table: "jobs", Tier: "jobs", Erasure: "the subject's jobs and every fork descending from them deleted, with checkpoints, steps and every step attempt (job_step_attempts: owner, input, error), handoffs, outbox rows, event logs"},
	{Table: "job_checkpoints", Tier: "jobs", Erasure: "deleted with the subject's jobs; versions written for the subject in other jobs are redacted (state, snapshot, plan emptied)"},
	{Table: "job_outbox", Tier: "jobs", Erasure: "deleted"},
	{Table: "langgraph_checkpoints", Tier: "jobs", Erasure: "deleted with the subject's threads (jobs); rows naming the subject in other threads deleted"},
	{Table: "langgraph_blobs", Tier: "jobs", Erasure: "deleted with the subject's threads (jobs); rows naming the subject in other threads deleted"},
	{Table: "langgraph_writes", Tier: "jobs", Erasure: "deleted with the subject's threads (jobs); rows naming the subject in other threads deleted"},
	{Table: "episodic_events", Tier: "episodic", Erasure: "deleted with the subject's jobs' logs; events recorded for the subject in other jobs are redacted (params {}, result, scope, key cleared, fingerprint replaced)"},
	{Table: "assets", Tier: "episodic", Erasure: "the subject's assets deleted with every version"},
	{Table: "asset_versions", Tier: "episodic", Erasure: "deleted with the subject's assets; versions recorded for the subject on other assets redacted"},
	{Table: "kv_entries", Tier: "keyvalue", Erasure: "user-level entries deleted; other entries written for the subject reduced to anonymous tombstones; cache keys dropped"},
	{Table: "kv_versions", Tier: "keyvalue", Erasure: "deleted"},
	{Table: "graph_entities", Tier: "graph", Erasure: "the subject's entities deleted (tombstones of merged ones first), with every relation naming them"},
	{Table: "graph_relations", Tier: "graph", Erasure: "every version of the subject's relations deleted, and of any relation whose subject or object is one of the subject's entities"},
	{Table: "memories", Tier: "semantic", Erasure: "every version deleted (text, embedding, re-embedding target, history)"},
	{Table: "memory_retrievals", Tier: "semantic", Erasure: "deleted (rows of searches for the subject, and rows that served the subject's memories)",
		Remaining: `SELECT count(*) FROM memory_retrievals WHERE org_id = $1 AND user_id = $2`},
	{Table: "idempotency_keys", Tier: "idempotency", Erasure: "deleted: by user_id, by the paths of erased jobs/sessions/assets, by responses quoting erased memory ids or the subject's user_id",
		Remaining: `SELECT count(*) FROM idempotency_keys WHERE org_id = $1 AND (user_id = $2
			OR position(convert_to('"user_id":' || to_jsonb($2::text)::text, 'UTF8') IN response_body) > 0)`},
	{Table: "extraction_state", Tier: "extraction", Erasure: "deleted (the subject's sessions' cursors and statuses); queued extraction jobs go with River's phase (their args name the user)"},
	{Table: "extraction_provenance", Tier: "extraction", Erasure: "deleted (where each extracted memory and preference came from; the memories and preferences go with their tiers)"},
	{Table: "summaries", Tier: "summaries", Erasure: "deleted (every version of the subject's session and job summaries); queued rolling-summary jobs go with River's phase (their args name the user)"},
	{Table: "gdpr_restrictions", Tier: "gdpr", Erasure: "deleted (nothing is left to restrict)"},
	{Table: "gdpr_erasures", Tier: "gdpr", Erasure: "the raw user_id is cleared when the erasure completes; the receipt keeps only the audit pseudonym",
		Remaining: `SELECT count(*) FROM gdpr_erasures WHERE org_id = $1 AND user_id = $2 AND status NOT IN ('pending', 'running')`},
}

// coveredTable reports whether t is in Covered.
func coveredTable(t string) bool {
	for _, c := range Covered {
		if c.Table == t {
			return true
		}
	}
	return false
}
