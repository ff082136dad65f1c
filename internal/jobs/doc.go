// Package jobs is Strata's durable-jobs tier on Postgres: the job record, its checkpoint
// history (every version kept, time travel, forks), leased steps with fencing tokens,
// acknowledged handoffs between agents, the one-call resume view, the stalled-job scan, and
// the completion outbox the workers tier consumes.
//
// Every method takes a pg.DBTX: in a request, the request's own transaction (the handler's r.Tx), so
// one API call is one transaction. Writes lock the job row (SELECT … FOR NO KEY UPDATE)
// first, which serialises the operations of one job: a checkpoint's If-Match, a step's
// claim and a handoff's ack each see the state the previous one committed.
//
// Time comes from the Store's clock (Go time, passed into every statement, never the
// database's now()), so lease expiry, stalled detection and their tests agree on "now".
//
// Steps: a claim (Start) hands out a fencing token that is strictly greater than every earlier
// token of that step (a per-step counter that only grows); heartbeat, complete and fail need
// the current token, so an agent whose lease was taken over is refused (ErrStaleToken →
// 409) and writes nothing. Every claim is kept as an attempt (job_step_attempts: owner,
// token, lease times, input, heartbeats, outcome), written by the same statement as the step
// row (a data-modifying CTE), so keeping them costs the step path no round trip.
// docs/jobs.md has the state machine and the agent protocol.
//
// Forks copy nothing of the checkpoint history: a fork's versions continue after the version
// it branched at, and reads of earlier versions walk up to the parent (lineage). A fork does
// copy its parent's step rows completed at the fork point, because it owns its own leases
// from then on. Events are shared by the episodic tier (composed in internal/httpapi).
package jobs
