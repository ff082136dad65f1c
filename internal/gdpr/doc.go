// Package gdpr is Strata's data-subject rights service: erasure (Art. 17) as a resumable
// River job with a verified receipt, export (Art. 15) streamed with provenance,
// rectification (Art. 16), and restriction of processing (Art. 18). It composes the tier
// packages (each owns the SQL and Redis keys of its erase/export helpers); the audit log
// (internal/audit) records every compliance action with the subject pseudonymised.
//
// # Erasure
//
// POST /v1/gdpr/erasures inserts a gdpr_erasures row and a River job in the request's
// transaction, so the job exists exactly when the request does. The worker takes a lease on
// the row, then runs the phases in Phases order. Each phase works in batches of
// STRATA_ERASURE_BATCH rows; every batch is one transaction that locks the erasure row,
// checks the lease is still this worker's (a worker that lost its lease stops), erases, and
// adds what it removed to the receipt's counts — so counts are exact for committed work and
// a kill at any point loses nothing but the batch in flight. A finished phase is recorded
// in phases_done; a resumed worker skips it. When the phases are done, Verify re-queries
// every tier (Covered tables, Redis index, River jobs, idempotency responses); anything
// found (data written for the subject while the erasure ran) starts another round, up to
// MaxRounds. Then the row is completed: the raw user_id is cleared and only the audit
// pseudonym stays with the receipt.
//
// Resumption: the lease expires STRATA_ERASURE_LEASE after the last batch of a worker that
// died; a sweeper on every replica (Sweeper) enqueues a fresh job for such erasures, which
// takes the lease over and continues from phases_done.
//
// Data written for the subject after the erasure completed is not erased by it: an erasure
// is a point-in-time action (send a new request, or restrict processing first so agents stop
// reading the subject's data).
package gdpr
