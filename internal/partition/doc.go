// Package partition moves an existing database's big tables — episodic_events, memories
// (every version of a memory is a row of it) and audit_log — to the hash-partitioned
// layout (PARTITION BY HASH (org_id), migrations/0033) while the service keeps serving.
//
// Per table: a shadow table <t>_partitioned is created with the same definition (the
// migration's SQL functions build it, so both paths give the same DDL) and a mirror
// trigger on the old table writes every insert, update, delete and truncate to it in the
// writer's own transaction. The existing rows are then copied in primary-key order, in
// batches of their own transactions, each recording its last key in
// strata_partition_moves with the rows it copied: a killed mover loses at most its
// current batch, and a rerun resumes after the last recorded key. Finally, under
// lock_timeout (2 s by default, retried) and ACCESS EXCLUSIVE on the old table, the shadow
// takes the old table's name, indexes, triggers, grants, identity positions and forced
// row-level security, and the old table is dropped (or kept as <t>_unpartitioned_old).
//
// The mover must see every org's rows: it runs as a superuser or a role with BYPASSRLS
// (the migration URL's role, normally the schema owner). Two movers never run at once
// (a session advisory lock).
package partition
