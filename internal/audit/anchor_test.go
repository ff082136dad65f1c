package audit_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

type anchorEnv struct {
	pool    *pgxpool.Pool
	dsn     string
	org     string
	signer  *audit.Signer
	keys    audit.Keyring
	sink    string
	anchors *audit.Anchorer
}

func newAnchorEnv(t *testing.T) *anchorEnv {
	t.Helper()
	pool, dsn := testenv.Pool(t)
	priv, _ := audit.NewSigningKey()
	s := audit.NewSigner(priv)
	sink := filepath.Join(t.TempDir(), "anchors.jsonl")
	e := &anchorEnv{pool: pool, dsn: dsn, org: "org-" + testenv.RandomID(6), signer: s, keys: audit.NewKeyring(s.Public()), sink: sink}
	e.anchors = &audit.Anchorer{Pool: pool, Signer: s, Sink: audit.NewAnchorSink(sink), Interval: time.Second, ExtraOrg: e.org}
	return e
}

func (e *anchorEnv) write(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pg.InOrgTx(ctx, e.pool, e.org, func(tx pgx.Tx) error {
		for i := 0; i < n; i++ {
			if err := audit.Append(ctx, tx, audit.Entry{OrgID: e.org, ActorKeyID: "k1", ActorRole: "agent", Action: "put-kv",
				EntityType: "kv", EntityID: "ns/k", Status: 200, Details: map[string]any{"i": i, "why": "test"}}); err != nil {
				return err
			}
		}
		return nil
	}))
}

func (e *anchorEnv) anchor(t *testing.T) audit.Anchor {
	t.Helper()
	n, err := e.anchors.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	as, err := e.readSink()
	require.NoError(t, err)
	return as[len(as)-1]
}

func (e *anchorEnv) readSink() ([]audit.Anchor, error) {
	f, err := os.Open(e.sink)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return audit.ReadAnchors(f)
}

// export reads the org's chain as an owner would dump it.
func (e *anchorEnv) export(t *testing.T) []audit.ChainRecord {
	t.Helper()
	recs, err := audit.ListChain(context.Background(), testenv.OwnerConn(t, e.dsn), e.org, 0, 100000)
	require.NoError(t, err)
	return recs
}

func (e *anchorEnv) offline(t *testing.T, recs []audit.ChainRecord) audit.OfflineReport {
	t.Helper()
	anchors, err := e.readSink()
	require.NoError(t, err)
	i := 0
	rep, err := audit.VerifyExport(func() (audit.ChainRecord, error) {
		if i == len(recs) {
			return audit.ChainRecord{}, errEOF
		}
		i++
		return recs[i-1], nil
	}, anchors, e.keys, nil)
	require.NoError(t, err)
	return rep
}

func (e *anchorEnv) serverVerify(t *testing.T) audit.Report {
	t.Helper()
	var rep audit.Report
	require.NoError(t, pg.InOrgTx(context.Background(), e.pool, e.org, func(tx pgx.Tx) error {
		var err error
		rep, err = audit.VerifyAnchored(context.Background(), tx, e.org, e.keys)
		return err
	}))
	return rep
}

// superuser runs fn as the database owner with the append-only trigger off: what someone
// with the owner role or a restored backup can do.
func (e *anchorEnv) superuser(t *testing.T, fn func(tx pgx.Tx)) {
	t.Helper()
	ctx := context.Background()
	c := testenv.OwnerConn(t, e.dsn)
	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL session_replication_role = replica`)
	require.NoError(t, err)
	fn(tx)
	require.NoError(t, tx.Commit(ctx))
}

func exec(t *testing.T, tx pgx.Tx, sql string, args ...any) {
	t.Helper()
	_, err := tx.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func TestAnchorsIntactAndUnanchored(t *testing.T) {
	t.Parallel()
	e := newAnchorEnv(t)
	e.write(t, 5)
	a := e.anchor(t)
	require.EqualValues(t, 5, a.Seq)
	require.NoError(t, a.Check(e.keys))
	n, err := e.anchors.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "an unchanged head is not anchored again")

	rep := e.offline(t, e.export(t))
	require.Equal(t, audit.StatusIntact, rep.Status, "%+v", rep)
	require.EqualValues(t, 5, rep.Checked)
	srv := e.serverVerify(t)
	require.True(t, srv.OK)
	require.NotNil(t, srv.Anchor)
	require.EqualValues(t, 5, srv.Anchor.Seq)

	// Newer records not yet anchored: unanchored, not intact.
	e.write(t, 3)
	_, err = audit.ChainOrg(context.Background(), e.pool, e.org)
	require.NoError(t, err)
	rep = e.offline(t, e.export(t))
	require.Equal(t, audit.StatusUnanchored, rep.Status)
	require.EqualValues(t, 3, rep.Unanchored)
	srv = e.serverVerify(t)
	require.True(t, srv.OK)
	require.EqualValues(t, 3, srv.Unanchored)

	// A forged anchor (signature of another key) is refused.
	other, _ := audit.NewSigningKey()
	forged := audit.NewSigner(other).Sign(audit.Anchor{OrgID: e.org, Seq: 8, HeadHash: "00", At: time.Now()})
	forged.KeyID = a.KeyID
	require.Error(t, forged.Check(e.keys))
	// Rotation: anchors of the previous key still verify when its public key is given.
	next := audit.NewSigner(other)
	e.anchors.Signer = next
	e.write(t, 1)
	require.EqualValues(t, next.KeyID(), e.anchor(t).KeyID)
	e.keys[next.KeyID()] = next.Public()
	rep = e.offline(t, e.export(t))
	require.Equal(t, audit.StatusIntact, rep.Status, "%+v", rep)
	require.Equal(t, 2, rep.Anchors)
}

// A superuser edits a record and re-chains everything with the server's own algorithm:
// the unanchored verify is fooled, the anchors are not, on the server or offline.
func TestAnchorsCatchARechainedRewrite(t *testing.T) {
	t.Parallel()
	e := newAnchorEnv(t)
	e.write(t, 6)
	e.anchor(t)
	before := e.export(t)

	e.superuser(t, func(tx pgx.Tx) {
		exec(t, tx, `UPDATE audit_log SET details = '{"i": 99, "why": "rewritten"}', seq = NULL, prev_hash = NULL, hash = NULL
			WHERE org_id = $1 AND id = $2`, e.org, before[2].ID)
		exec(t, tx, `UPDATE audit_log SET seq = NULL, prev_hash = NULL, hash = NULL WHERE org_id = $1`, e.org)
		exec(t, tx, `UPDATE audit_chain_heads SET seq = 0, hash = '' WHERE org_id = $1`, e.org)
		n, err := audit.Chain(context.Background(), tx, e.org, 1000)
		require.NoError(t, err)
		require.Equal(t, 6, n)
	})
	var plain audit.Report
	require.NoError(t, pg.InOrgTx(context.Background(), e.pool, e.org, func(tx pgx.Tx) error {
		var err error
		plain, err = audit.Verify(context.Background(), tx, e.org)
		return err
	}))
	require.True(t, plain.OK, "the hash chain alone cannot tell: that is why anchors exist")

	srv := e.serverVerify(t)
	require.False(t, srv.OK)
	require.Contains(t, srv.FirstBroken.Reason, "re-chained")
	rep := e.offline(t, e.export(t))
	require.Equal(t, audit.StatusBroken, rep.Status)
	require.Contains(t, rep.FirstBroken.Reason, "re-chained")
}

func TestAnchorsCatchEditDeleteTruncate(t *testing.T) {
	t.Parallel()
	e := newAnchorEnv(t)
	e.write(t, 6)
	e.anchor(t)
	recs := e.export(t)

	edited := append([]audit.ChainRecord(nil), recs...)
	edited[1].Details = strings.Replace(edited[1].Details, "test", "tset", 1)
	rep := e.offline(t, edited)
	require.Equal(t, audit.StatusBroken, rep.Status)
	require.EqualValues(t, 2, rep.FirstBroken.Seq)
	require.Contains(t, rep.FirstBroken.Reason, "edited")

	deleted := append(append([]audit.ChainRecord(nil), recs[:3]...), recs[4:]...)
	rep = e.offline(t, deleted)
	require.Equal(t, audit.StatusBroken, rep.Status)
	require.Contains(t, rep.FirstBroken.Reason, "missing")

	truncated := recs[:4]
	rep = e.offline(t, truncated)
	require.Equal(t, audit.StatusBroken, rep.Status)
	require.Contains(t, rep.FirstBroken.Reason, "removed from the end")

	// The same deletion in the database: the server's verify names it too.
	e.superuser(t, func(tx pgx.Tx) {
		exec(t, tx, `DELETE FROM audit_log WHERE org_id = $1 AND seq > 4`, e.org)
		exec(t, tx, `UPDATE audit_chain_heads SET seq = 4, hash = $2 WHERE org_id = $1`, e.org, mustHex(t, recs[3].Hash))
	})
	srv := e.serverVerify(t)
	require.False(t, srv.OK)
	require.Contains(t, srv.FirstBroken.Reason, "records removed")
}

func TestAnchorSinkLines(t *testing.T) {
	t.Parallel()
	e := newAnchorEnv(t)
	e.write(t, 2)
	a, ok, err := e.anchors.AnchorNow(context.Background(), e.org, false)
	require.NoError(t, err)
	require.True(t, ok)
	b, err := os.ReadFile(e.sink)
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(b, []byte("\n")))
	as, err := e.readSink()
	require.NoError(t, err)
	require.Equal(t, a.Signature, as[0].Signature)
	require.Zero(t, as[0].ID, "the sink carries no database id")
	list, err := audit.ListAnchors(context.Background(), testenv.OwnerConn(t, e.dsn), e.org, 0, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, list[0].Check(e.keys), "the stored anchor verifies as read back")
}
