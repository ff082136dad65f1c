// Package deploytest proves a rolling deploy from outside: it builds the previous
// release's server (the newest commit whose migration set is older than this tree's) and
// the current one, runs three replicas of the old binary on one database behind an
// in-process round-robin proxy, replaces them one at a time with the new binary under a
// mixed load, and then injects faults (SIGTERM restarts, a SIGKILL, a Redis flush, a
// Postgres cut). Every acknowledged write of its verifier is checked in Postgres and
// through the API at the end: nothing acknowledged may be missing or duplicated.
//
// `go test ./...` runs a bounded variant (a few minutes); `make deploy-test`
// (STRATA_DEPLOY_TEST=full) runs the long one and prints the operator's report.
// docs/reliability.md, "Rolling deploys and the deploy test", describes both.
package deploytest
