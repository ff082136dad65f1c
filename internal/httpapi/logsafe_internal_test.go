package httpapi

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestLogSafeDropsPostgresText: Postgres's message and detail may quote a statement's
// values (a name, a text, the key that collided); the log of a 500 keeps the SQLSTATE,
// table and constraint and our own wrapping, not them.
func TestLogSafeDropsPostgresText(t *testing.T) {
	t.Parallel()
	pe := &pgconn.PgError{Severity: "ERROR", Code: "22P02", Message: `invalid input syntax for type uuid: "Ana Silva"`,
		Detail: "Key (name_key)=(ana silva) already exists.", TableName: "graph_entities", ConstraintName: "graph_entities_name"}
	got := logSafe(fmt.Errorf("creating an entity: %w", pe))
	require.NotContains(t, got, "Ana")
	require.NotContains(t, got, "ana silva")
	require.Contains(t, got, "creating an entity: postgres error SQLSTATE 22P02")
	require.Contains(t, got, "graph_entities_name")
	require.Equal(t, "plain", logSafe(fmt.Errorf("plain")))
}
