package summaries_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/testenv"
)

func TestVersionsRollAndConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := testenv.Pool(t)
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	in := func(org string, f func(tx pgx.Tx) error) error { return pg.InOrgTx(ctx, pool, org, f) }

	n := summaries.New{Kind: summaries.KindSession, SubjectID: "s1", UserID: "u1", FromSeq: 1, AddedFrom: 1, ToSeq: 10,
		Items: 10, Text: "first", Tokens: 1, Summarizer: "extractive", At: at}
	require.NoError(t, in("acme", func(tx pgx.Tx) error {
		s, err := summaries.Write(ctx, tx, "acme", n, 0)
		require.NoError(t, err)
		require.EqualValues(t, 1, s.Version)
		n.Text, n.AddedFrom, n.ToSeq = "second", 11, 30
		s, err = summaries.Write(ctx, tx, "acme", n, 1)
		require.NoError(t, err)
		require.EqualValues(t, 2, s.Version)
		// A writer that built on version 1 lost the race: nothing written.
		_, err = summaries.Write(ctx, tx, "acme", n, 1)
		require.ErrorIs(t, err, strata.ErrConflict)
		// Bad input names the field.
		bad := n
		bad.ToSeq = 5
		_, err = summaries.Write(ctx, tx, "acme", bad, 2)
		var fe *strata.FieldError
		require.True(t, errors.As(err, &fe))
		require.Equal(t, "to_seq", fe.Field)
		bad = n
		bad.Text = "a\x00b"
		_, err = summaries.Write(ctx, tx, "acme", bad, 2)
		require.True(t, errors.As(err, &fe))
		require.Equal(t, "text", fe.Field)

		l, err := summaries.Latest(ctx, tx, "acme", summaries.KindSession, "s1")
		require.NoError(t, err)
		require.Equal(t, "second", l.Text)
		require.EqualValues(t, 11, l.AddedFrom)
		require.EqualValues(t, 30, l.ToSeq)
		vs, err := summaries.Versions(ctx, tx, "acme", summaries.KindSession, "s1", 0, 10)
		require.NoError(t, err)
		require.Len(t, vs, 2)
		require.Equal(t, "first", vs[1].Text)
		vs, err = summaries.Versions(ctx, tx, "acme", summaries.KindSession, "s1", 2, 10)
		require.NoError(t, err)
		require.Len(t, vs, 1)

		due, covered, err := summaries.Due(ctx, tx, "acme", summaries.KindSession,
			[]summaries.Candidate{{ID: "s1", UpTo: 35}, {ID: "s1x", UpTo: 35}, {ID: "s2", UpTo: 60}}, 20)
		require.NoError(t, err)
		require.Equal(t, []summaries.Candidate{{ID: "s1x", UpTo: 35}, {ID: "s2", UpTo: 60}}, due)
		require.Equal(t, []int64{0, 0}, covered)
		return nil
	}))
	// Another org sees nothing (row-level security).
	require.NoError(t, in("other", func(tx pgx.Tx) error {
		_, err := summaries.Latest(ctx, tx, "other", summaries.KindSession, "s1")
		require.ErrorIs(t, err, strata.ErrNotFound)
		var k int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM summaries`).Scan(&k))
		require.Zero(t, k)
		return nil
	}))
	require.NoError(t, in("acme", func(tx pgx.Tx) error {
		k, err := summaries.EraseUser(ctx, tx, "acme", "u1")
		require.NoError(t, err)
		require.EqualValues(t, 2, k)
		_, err = summaries.Latest(ctx, tx, "acme", summaries.KindSession, "s1")
		require.ErrorIs(t, err, strata.ErrNotFound)
		return nil
	}))
}
