package pg

import "context"

// VectorVersion is the installed version of the pgvector extension, "" when it is not
// installed (run `server migrate`). An error means Postgres did not answer.
func VectorVersion(ctx context.Context, q DBTX) (string, error) {
	var v string
	err := q.QueryRow(ctx, `SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = 'vector'), '')`).Scan(&v)
	return v, err
}
