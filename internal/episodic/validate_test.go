package episodic_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

// requireField asserts err is a FieldError for the bare field name (the transport adds
// where the field travelled).
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field, "%v", err)
	require.Equal(t, strata.FieldInvalid, fe.Kind, "%v", err)
}

// List parses its cursor and checks op and the time range; a cursor replaces AfterSeq.
func TestListChecksCursorOpAndRange(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	ctx := context.Background()
	appendOne(t, pool, st, "acme", "j",
		episodic.EventInput{Op: "a"}, episodic.EventInput{Op: "b"}, episodic.EventInput{Op: "a", Params: json.RawMessage(`{"n":2}`)})
	list := func(q episodic.ListQuery) ([]episodic.Event, error) {
		return inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) { return st.List(ctx, tx, "acme", "j", q) })
	}
	now := time.Now()
	for _, c := range []struct {
		q     episodic.ListQuery
		field string
	}{
		{episodic.ListQuery{Cursor: "x"}, "cursor"},
		{episodic.ListQuery{Cursor: "-1"}, "cursor"},
		{episodic.ListQuery{Op: "a\nb"}, "op"},
		{episodic.ListQuery{Since: now, Until: now}, "until"},
	} {
		_, err := list(c.q)
		requireField(t, err, c.field)
	}
	evs, err := list(episodic.ListQuery{AfterSeq: 0, Cursor: "1", Limit: 10})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.EqualValues(t, 2, evs[0].Seq, "the cursor replaces after_seq")
	evs, err = list(episodic.ListQuery{Op: "a", Limit: 10})
	require.NoError(t, err)
	require.Len(t, evs, 2)
}

// AppliedEdit answers by fingerprint or by op and params, and names the field it refuses.
func TestAppliedEditQuestions(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	ctx := context.Background()
	evs := appendOne(t, pool, st, "acme", "j", episodic.EventInput{Op: "crop", Params: json.RawMessage(`{"w":1,"h":2}`)})
	fp := evs[0].Fingerprint
	ask := func(q episodic.AppliedQuery) (*episodic.Event, string, error) {
		var ev *episodic.Event
		var got string
		_, err := inTx(t, pool, "acme", func(tx pgx.Tx) (struct{}, error) {
			var err error
			ev, got, err = st.AppliedEdit(ctx, tx, "acme", "j", q)
			return struct{}{}, err
		})
		return ev, got, err
	}
	for _, c := range []struct {
		q     episodic.AppliedQuery
		field string
	}{
		{episodic.AppliedQuery{Fingerprint: fp, Op: "crop"}, "fingerprint"},
		{episodic.AppliedQuery{Fingerprint: "abc"}, "fingerprint"},
		{episodic.AppliedQuery{Op: "crop", Params: "[1]"}, "params"},
		{episodic.AppliedQuery{Op: "crop", Params: `{"w":`}, "params"},
		{episodic.AppliedQuery{Op: "a\x00"}, "op"},
		{episodic.AppliedQuery{}, "op"},
	} {
		_, _, err := ask(c.q)
		requireField(t, err, c.field)
	}
	ev, got, err := ask(episodic.AppliedQuery{Op: "crop", Params: `{"h":2, "w":1}`})
	require.NoError(t, err)
	require.Equal(t, fp, got)
	require.NotNil(t, ev)
	require.Equal(t, evs[0].Seq, ev.Seq)
	ev, got, err = ask(episodic.AppliedQuery{Fingerprint: fp})
	require.NoError(t, err)
	require.Equal(t, fp, got)
	require.NotNil(t, ev)
	ev, _, err = ask(episodic.AppliedQuery{Op: "crop", Params: "null"})
	require.NoError(t, err)
	require.Nil(t, ev, "crop with {} was never applied")
}

// ListVersions parses its cursor; asset and revert errors name bare fields.
func TestAssetAndRevertFieldsAreBare(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	ctx := context.Background()
	_, err := inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Asset, error) {
		a, _, err := st.PutAsset(ctx, tx, "acme", "a1", episodic.AssetInput{URI: "s3://b/1"}, nil)
		return a, err
	})
	require.NoError(t, err)
	for i := 2; i <= 3; i++ {
		_, err = inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.AssetVersion, error) {
			return st.AddVersion(ctx, tx, "acme", "a1", int64(i-1), episodic.AssetInput{URI: "s3://b/" + strconv.Itoa(i)})
		})
		require.NoError(t, err)
	}
	versions := func(cursor string) ([]episodic.AssetVersion, error) {
		return inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.AssetVersion, error) {
			return st.ListVersions(ctx, tx, "acme", "a1", cursor, 10)
		})
	}
	for _, c := range []string{"x", "-2"} {
		_, err := versions(c)
		requireField(t, err, "cursor")
	}
	vs, err := versions("1")
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.EqualValues(t, 2, vs[0].Version)

	for _, c := range []struct {
		in    episodic.AssetInput
		field string
	}{
		{episodic.AssetInput{}, "uri"},
		{episodic.AssetInput{URI: "s3://b/x", MediaType: "not a type"}, "media_type"},
		{episodic.AssetInput{URI: "s3://b/x", Metadata: json.RawMessage(`[1]`)}, "metadata"},
		{episodic.AssetInput{URI: "s3://b/x", UserID: "no spaces"}, "user_id"},
		{episodic.AssetInput{URI: "s3://b/x", Seq: 1}, "job_id"},
	} {
		_, err := inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Asset, error) {
			a, _, err := st.PutAsset(ctx, tx, "acme", "a2", c.in, nil)
			return a, err
		})
		requireField(t, err, c.field)
	}

	evs := appendOne(t, pool, st, "acme", "j", episodic.EventInput{Op: "crop"})
	for _, c := range []struct {
		in    episodic.RevertInput
		field string
	}{
		{episodic.RevertInput{Reason: "a\x00"}, "reason"},
		{episodic.RevertInput{AgentID: "no spaces"}, "agent_id"},
	} {
		_, err := inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Event, error) {
			ev, _, err := st.Revert(ctx, tx, "acme", "j", evs[0].Seq, c.in)
			return ev, err
		})
		requireField(t, err, c.field)
	}
	rev, err := inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Event, error) {
		ev, _, err := st.Revert(ctx, tx, "acme", "j", evs[0].Seq, episodic.RevertInput{})
		return ev, err
	})
	require.NoError(t, err)
	_, err = inTx(t, pool, "acme", func(tx pgx.Tx) (episodic.Event, error) {
		ev, _, err := st.Revert(ctx, tx, "acme", "j", rev.Seq, episodic.RevertInput{})
		return ev, err
	})
	requireField(t, err, "seq")

	// A batch names the element: "[1].op" (the HTTP layer makes it body[1].op).
	_, err = inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) {
		return st.Append(ctx, tx, "acme", "j", []episodic.EventInput{{Op: "ok"}, {Op: ""}})
	})
	requireField(t, err, "[1].op")
}
