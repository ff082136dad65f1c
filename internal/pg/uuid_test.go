package pg_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// uuid.UUID parameters, alone, in slices and as array elements next to NULL, reach
// Postgres as the same uuids whether pgx encodes them through their Valuer or (NewPool) in
// binary.
func TestUUIDParametersRoundTrip(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	ctx := context.Background()
	one := uuid.New()
	many := []uuid.UUID{uuid.New(), uuid.Nil, uuid.New()}
	var gotOne uuid.UUID
	var gotMany []uuid.UUID
	var texts []string
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid, $2::uuid[], $2::uuid[]::text[], cardinality($2::uuid[])`,
		one, many).Scan(&gotOne, &gotMany, &texts, &n))
	require.Equal(t, one, gotOne)
	require.Equal(t, many, gotMany)
	require.Equal(t, 3, n)
	for i, u := range many {
		require.Equal(t, u.String(), texts[i])
	}
	var found bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid = ANY($2::uuid[])`, many[2], many).Scan(&found))
	require.True(t, found)
	var asText string
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text`, one).Scan(&asText))
	require.Equal(t, one.String(), asText, "a text parameter still gets the uuid's text (its Valuer)")
	var p *uuid.UUID
	var isNull bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid IS NULL`, p).Scan(&isNull))
	require.True(t, isNull, "a nil *uuid.UUID is NULL")
}

// BenchmarkEncodeUUIDArray: an id array of a search's size (25) encoded as a parameter,
// through uuid.UUID's Valuer (pgx's default) and in binary (pg.EncodeUUIDsInBinary).
func BenchmarkEncodeUUIDArray(b *testing.B) {
	ids := make([]uuid.UUID, 25)
	for i := range ids {
		ids[i] = uuid.New()
	}
	for _, c := range []struct {
		name   string
		binary bool
	}{{"valuer", false}, {"binary", true}} {
		b.Run(c.name, func(b *testing.B) {
			m := pgtype.NewMap()
			if c.binary {
				pg.EncodeUUIDsInBinary(m)
			}
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
