// Package migrations embeds Strata's schema as numbered SQL files. Each file runs in its own
// transaction under an advisory lock (see internal/pg.Migrate), so a failed file leaves the
// schema as it was and replicas starting together never race.
//
// Every file after 0047 declares its phase in its first lines (docs/operations.md, "How to
// upgrade"): "-- strata:phase expand" keeps the previous release's server working;
// "-- strata:phase contract [requires NNNN]" removes what only older releases used and makes
// builds older than NNNN (default: the file itself) refuse to start. TestMigrationsAreExpandContract
// holds new files to the rule.
//
// Conventions every file follows:
//   - every tenant table has org_id text NOT NULL with a non-empty check, and every primary key
//     and unique constraint leads with org_id (Citus distribution / partitioning by org);
//   - every table that holds memory calls strata_enable_rls('name'), which enables and forces
//     row-level security keyed on the transaction's app.org_id setting;
//   - an index on a table that already exists is built with CREATE INDEX CONCURRENTLY, in a
//     file marked "-- strata:no-transaction" (its statements run one by one, each committing
//     on its own; "DROP INDEX CONCURRENTLY IF EXISTS" first, so a failed build can be rerun);
//     a backfill of an existing table commits per batch (a DO loop with LIMIT and COMMIT in
//     such a file).
package migrations

import "embed"

// FS holds the NNNN_name.sql files.
//
//go:embed *.sql
var FS embed.FS
