// Package migrations embeds Strata's schema as numbered SQL files. Each file runs in its own
// transaction under an advisory lock (see internal/pg.Migrate), so a failed file leaves the
// schema as it was and replicas starting together never race.
//
// Conventions every file follows:
//   - every tenant table has org_id text NOT NULL with a non-empty check, and every primary key
//     and unique constraint leads with org_id (Citus distribution / partitioning by org);
//   - every table that holds memory calls strata_enable_rls('name'), which enables and forces
//     row-level security keyed on the transaction's app.org_id setting;
//   - no CREATE INDEX CONCURRENTLY (it cannot run inside a transaction).
package migrations

import "embed"

// FS holds the NNNN_name.sql files.
//
//go:embed *.sql
var FS embed.FS
