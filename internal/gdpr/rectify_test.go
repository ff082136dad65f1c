package gdpr_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/gdpr"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/testenv"
)

func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field)
}

// TestGDPRRequestChecksNameBareFields: what the tier checks before touching Postgres names
// the field bare (the transport adds body./query.).
func TestGDPRRequestChecksNameBareFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rf gdpr.Rectifier
	text := "fixed"
	_, err := rf.Rectify(ctx, nil, nil, gdpr.RectifyRequest{OrgID: "o", UserID: "u"})
	requireField(t, err, "memory") // neither memory nor kv
	_, err = rf.Rectify(ctx, nil, nil, gdpr.RectifyRequest{OrgID: "o", UserID: "u", Reason: "a\x00b",
		Memory: &gdpr.MemoryCorrection{ID: "x", Text: &text}})
	requireField(t, err, "reason")
	_, err = rf.Rectify(ctx, nil, nil, gdpr.RectifyRequest{OrgID: "o", UserID: "u",
		Memory: &gdpr.MemoryCorrection{ID: "not-a-uuid", Text: &text}})
	requireField(t, err, "memory.id")

	_, err = gdpr.CreateErasure(ctx, nil, nil, gdpr.NewErasure{OrgID: "o", UserID: "u", Reason: "\x00"})
	requireField(t, err, "reason")
	_, _, err = gdpr.Restrict(ctx, nil, "o", "u", "k", "\x00", time.Now())
	requireField(t, err, "reason")
	_, err = gdpr.ListErasures(ctx, nil, "o", "", "not-a-cursor", 10)
	requireField(t, err, "cursor")
}

// TestGDPRRectifyKV: a key-value correction through the rectifier writes op rectify and an
// audit record naming the entry with the subject's pseudonym; another subject's entry is
// refused on field "kv".
func TestGDPRRectifyKV(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	rdb, prefix := testenv.Redis(t)
	kv := keyvalue.New(pool, rdb, keyvalue.Options{Prefix: prefix})
	pseudo := audit.NewPseudonymizer("k")
	rf := gdpr.Rectifier{KV: kv, Pseudo: pseudo}
	ctx := context.Background()
	const org = "org-rectify"
	run := func(fn func(tx pgx.Tx, ac func(func())) error) error {
		sess := pg.NewSession(pool, org)
		tx, err := sess.Tx(ctx)
		if err != nil {
			return err
		}
		if err := fn(tx, sess.AfterCommit); err != nil {
			sess.Rollback(ctx)
			return err
		}
		return sess.Commit(ctx)
	}
	require.NoError(t, run(func(tx pgx.Tx, ac func(func())) error {
		_, _, err := kv.Put(ctx, tx, ac, keyvalue.WriteInput{Namespace: "prefs", Key: "lang", Actor: "agent",
			Scope: strata.Scope{OrgID: org, UserID: "u1", AgentID: "a1"}, Value: json.RawMessage(`"de"`)})
		return err
	}))
	req := gdpr.RectifyRequest{OrgID: org, UserID: "u2", Reason: "ticket 7", KeyID: "key-c", Role: "compliance",
		RequestID: "req-1", At: time.Now(), KV: &gdpr.KVCorrection{Namespace: "prefs", Key: "lang", AgentID: "a1",
			Value: json.RawMessage(`"fr"`)}}
	err := run(func(tx pgx.Tx, ac func(func())) error { _, err := rf.Rectify(ctx, tx, ac, req); return err })
	requireField(t, err, "kv")

	req.UserID = "u1"
	var out gdpr.Rectification
	require.NoError(t, run(func(tx pgx.Tx, ac func(func())) error {
		var err error
		out, err = rf.Rectify(ctx, tx, ac, req)
		return err
	}))
	require.Equal(t, "kv", out.Type)
	require.Equal(t, int64(1), out.PreviousVersion)
	require.Equal(t, int64(2), out.KV.Version)
	got, err := kv.Get(ctx, "prefs", "lang", strata.Scope{OrgID: org, UserID: "u1", AgentID: "a1"}, true)
	require.NoError(t, err)
	require.JSONEq(t, `"fr"`, string(got.Value))
	require.NoError(t, run(func(tx pgx.Tx, _ func(func())) error {
		recs, err := audit.List(ctx, tx, org, audit.Filter{Action: "rectification", Limit: 10})
		if err != nil {
			return err
		}
		require.Len(t, recs, 1)
		require.Equal(t, "prefs/lang@agent", recs[0].EntityID)
		require.Equal(t, pseudo.Subject(org, "u1"), recs[0].Subject)
		return nil
	}))
}
