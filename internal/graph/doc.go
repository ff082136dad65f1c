// Package graph is Strata's graph memory: the entities an agent's memory is about (people,
// places, organisations, things) and the relations between them, with time on two axes.
// It owns graph_entities and graph_relations (migrations/0040_graph.sql); docs/graph.md
// explains the model and how it maps to Graphiti's and Mem0's.
//
// # Entities and resolution
//
// An entity lives in one scope (org, and optionally user, agent, session, as every tier
// stores scope) and has a name, a type, aliases, a summary and optionally an embedding of
// name + summary that the caller made (the store never embeds). Resolve finds the live
// entity of the scope whose name or aliases match any of the given forms, after
// normalisation (lower case, whitespace collapsed), or creates one, and unions the new
// forms into its aliases. It is race-free: it takes a transaction-level advisory lock on
// the scope before it looks, so concurrent writers resolving "Ana", "Ana Silva" (alias
// "Ana") and "ana" settle on one entity; a unique index on the normalised name is the
// backstop. A resolution never merges two existing entities on its own: Merge does, on
// request; the survivor takes the relations and the aliases and the merged entity stays
// as a tombstone pointing to it. Split undoes a wrong join by hand. Search finds entities
// by exact name or alias, full text and embedding, fused by reciprocal rank.
//
// # Relations and time
//
// A relation is subject -predicate-> object, where the object is another entity or a
// literal value, with its provenance (the memory, job and event it came from, the writer)
// and two time axes: valid_from/valid_to, when it was true in the world, and
// recorded_at/superseded_at, when Strata learned it and when Strata learned it had ended.
// A relation is in force when neither axis has closed it. Adding a relation whose
// predicate is functional (one object at a time: works_at, lives_in) closes the one in
// force for the same subject and predicate with another object — valid_to becomes the new
// relation's valid_from, superseded_at the time of the write — and keeps it: history and
// as-of reads (either axis) see it. A relation that arrives late, already older than the
// one in force, is recorded as closed where the newer one begins. Adding a relation that
// is already in force (same subject, predicate and object) writes nothing and answers the
// existing one. Writes of one subject's relations serialise on the subject's row.
//
// # Scope, isolation and erasure
//
// Every statement names the org and forced row-level security backs it. A relation is
// written in a scope and may only connect entities that scope can see (each level an
// entity sets must match the writer's), so a turn cannot reach into another user's graph.
// EraseUser and EraseMemories remove a data subject's entities and relations and count
// them for a receipt; ExportUser returns them.
//
// # Locks
//
// Resolution, merge, split and delete of a scope's entities take a transaction-level
// advisory lock on the scope; relation writes lock their subject (FOR NO KEY UPDATE) and
// share-lock their object, merges lock both entities, always in id order, so a relation
// that races a merge either commits before it (and is re-pointed) or waits and follows the
// merged id to the survivor. Advisory locks are held to the end of the transaction: a
// transaction that resolves entities of several scopes, or interleaves resolutions with
// relation writes, can deadlock with another doing the same in another order. Postgres
// detects it and the loser gets strata.ErrConflict (retry); resolving a turn's entities
// first, then adding its relations, avoids it.
//
// Every method takes the caller's transaction (pg.DBTX) bound to the org; the store holds
// no connection.
package graph
