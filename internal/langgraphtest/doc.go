// Package langgraphtest runs the LangGraph side of Strata from `go test`: it starts a real
// Strata server (apptest) and drives the TypeScript client in clients/langgraph-js with Node:
//
//   - TestLangGraphConformance runs LangGraph's own checkpointer conformance suite
//     (@langchain/langgraph-checkpoint-validation, library mode under vitest) against the
//     server and fails with the suite's output when any check fails;
//   - TestLangGraphCrashResume runs a five-node @langchain/langgraph graph on StrataSaver,
//     SIGKILLs it inside the third node, runs it again, and checks that with durability "sync"
//     it resumes at the node that was cut short (no completed node runs again), and measures
//     what durability "async" loses in the same crash.
//
// Node 20+ is required (the suite fails, not skips, without it). The npm dependencies come
// from clients/langgraph-js/package-lock.json: scripts/test-deps.sh installs them, and the
// tests run `npm ci` themselves when node_modules is missing.
package langgraphtest
