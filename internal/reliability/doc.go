// Package reliability holds the tests that try to break Strata's guarantees from outside:
//
//   - faults between the server and its stores (toxiproxy in-process: latency, dropped and
//     reset connections, black holes, Postgres and Redis down then back), with an
//     all-or-nothing check of every write in the database and goroutine / connection leak
//     counts before and after;
//   - a hung store (Postgres or Redis black-holed, new connections hanging) answering 503
//     within the store timeout, not the request timeout; a COMMIT whose answer is lost (or
//     that never arrives) answering the typed 503 that says the outcome is unknown, and its
//     Idempotency-Key retry replaying what committed or running the write once;
//   - crash under load: 16 concurrent clients writing events, checkpoints and memories with
//     Idempotency-Keys while the real server binary is SIGKILLed several times;
//   - two replicas behind a round-robin proxy, one SIGKILLed mid-run, with background jobs
//     checked for single execution and key revocation checked across replicas.
//
// The soak (STRATA_SOAK=1, `make soak`) runs the crash workload longer with more kills.
// STRATA_RELIABILITY_SEED replays a run (the seed is logged).
package reliability
