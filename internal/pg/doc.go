// Package pg is Strata's Postgres plumbing: the connection pool (whose connections run as
// the non-privileged strata_app role so row-level security binds), migrations under an
// advisory lock, the per-org transaction every query runs in, and the translation of
// driver errors into strata's sentinel errors. Tier packages hold their own SQL; they get
// a pgx.Tx from here.
package pg
