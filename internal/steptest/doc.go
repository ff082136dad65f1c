// Package steptest holds the process-crash test of the Go client's step helpers
// (client.RunStep and client.Once): a worker process — this package's test binary,
// re-executed — runs a 10-step job whose steps each perform a side effect outside Strata
// (a line in an fsync'd ledger file, keyed by Once's key), and the test SIGKILLs it at chosen
// points (after a side effect before it is logged, after it is logged before the step
// completes) and at random moments, restarting it until the job completes. It then checks
// that every side effect is in the ledger exactly once, that no completed step ran again,
// that the only side effects repeated (and absorbed by the ledger's key) were those cut off in
// the documented window between the effect and its event, and that Strata holds one event
// and one completed claim per step.
//
// STEPTEST_SEED replays a run's random kill times (the seed is logged).
package steptest
