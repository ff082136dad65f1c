// Package pythontest runs the Python client's test suite (clients/python/tests, pytest) from
// `go test`, so `make test` covers it: it starts a real Strata server (apptest), creates an
// agent key for a fresh org, and runs Debian's /usr/bin/python3 -m pytest against it with
// STRATA_URL, STRATA_API_KEY, STRATA_ADMIN_KEY and STRATA_ORG_ID set and PYTHONPATH pointing
// at clients/python/src, so nothing is installed. The suite covers every API area, retries
// with one Idempotency-Key, durable steps (lease loss, takeover, manual review, an outage
// mid-step) and a SIGKILL crash test of a 10-step job.
package pythontest
