package pg

// Plan choice for prepared statements on the partitioned tables.
//
// pgx prepares every statement once per connection, and Postgres then chooses per execution
// between the statement's generic plan and a custom plan for the parameters at hand. On a
// hash-partitioned table (episodic_events, memories, audit_log; STRATA_PARTITIONS) Postgres
// 15 prices the generic plan as if it read every partition — which partition `org_id = $1`
// selects is only known at executor start-up, where the others are pruned for nearly
// nothing — so the generic plan always looks dearer and every execution is planned afresh:
// 0.6–0.8 ms for each search leg and each resume's event read under the mixed load test,
// 40–55 % of a core at 700 req/s, against 2 % on the unpartitioned layout, where Postgres
// picks the generic plans by itself (pg_stat_statements with track_planning;
// docs/benchmarks.md "Planning on the partitioned layout").
//
// A pipeline of statements whose plan does not depend on their parameters (key and
// scope-prefix reads: resume's batch, the scope lock, the duplicate checks, the exact vector
// leg) queues GenericPlansSQL before them and DefaultPlansSQL after them; set_config's and
// SET LOCAL's effect ends with the transaction at the latest, and in a pipeline they cost no
// round trip. A statement whose best plan does depend on them stays on custom plans
// (CustomPlansSQL): the full-text leg over a large scope, whose generic plan ANDs the scope's
// b-tree with the whole partition's GIN index (27 ms against 6 ms for a common word over an
// 1,800-row scope at 100k memories, EXPLAIN ANALYZE; a small scope's leg is written scope
// first and planned generically), and the HNSW leg (semantic sets it with its scan
// settings). That is why this is not the pool's setting.
const (
	GenericPlansSQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
	CustomPlansSQL  = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)"
	DefaultPlansSQL = "SET LOCAL plan_cache_mode TO DEFAULT"
)
