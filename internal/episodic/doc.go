// Package episodic is Strata's episodic memory on Postgres: the ordered, append-only edit
// log of each job, and the asset registry.
//
// Every event of a job gets a seq that is strictly increasing and gap-free: an append locks
// the job's counter row (episodic_jobs.last_seq) inside the caller's transaction and hands
// out last_seq+1..last_seq+n, so concurrent appenders serialise per job and a rolled-back
// append gives its numbers back. Each event carries an op fingerprint, the SHA-256 of the
// op and the canonical JSON of its params (Canonicalize), which answers "has exactly this
// edit been applied, and not reverted?" (Store.Applied). Reverting appends a compensating
// `revert` event; nothing is ever updated or deleted (a database trigger refuses it, except
// for erasure and retention, which opt in with SET LOCAL strata.allow_event_delete = 'on').
//
// A fork (Store.Fork) is a job whose log starts as its parent's log up to a seq: reads
// union the parent's events up to that seq with the fork's own, and the fork's seqs
// continue after it. Nothing is copied.
//
// Assets have one stable address, a current version and a linear lineage of versions, each
// naming its parent version (optimistic concurrency: a stale parent is a conflict) and the
// job event that produced it.
//
// Stores take a pg.DBTX: in a request, the request's transaction (the handler's r.Tx). Appends and
// asset writes must run inside a transaction, since their locks are what make them safe.
// docs/episodic.md documents the schema, the canonicalisation rule and the partitioning
// choice.
package episodic
