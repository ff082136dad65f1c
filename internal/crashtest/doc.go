// Package crashtest holds the kill -9 test of durable jobs: it builds the real server
// binary, runs it as a subprocess on a test database, drives a 20-step job through the HTTP
// API with a client whose steps have side effects outside Strata (an append-only ledger
// file), SIGKILLs the server at random points (between requests and in the middle of them,
// including between a step's start and its completion), restarts it, and resumes each time
// the way docs/jobs.md tells agents to. It then checks that every side effect happened
// exactly once, no completed step ran again, every acknowledged event and checkpoint is
// present, and the job's event seqs are gap-free.
//
// STRATA_CRASH_SEED replays a run (the seed is logged).
package crashtest
