package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/cli"
	"github.com/strata-mem/strata/internal/testenv"
)

// auditKeysEnv is a production-mode environment with fresh audit keys, its anchor file and
// the public key an outsider verifies with.
type auditKeysEnv struct {
	seed, pub, pseudonymKey, anchorFile string
}

func newAuditKeys(t *testing.T) auditKeysEnv {
	priv, seed := audit.NewSigningKey()
	return auditKeysEnv{seed: seed, pub: audit.EncodePublicKey(audit.NewSigner(priv).Public()), pseudonymKey: audit.NewPseudonymKey(),
		anchorFile: filepath.Join(t.TempDir(), "anchors.jsonl")}
}

func (k auditKeysEnv) opts(extra ...apptest.Option) []apptest.Option {
	return append([]apptest.Option{apptest.Env("STRATA_ENV", "production"), apptest.Env("STRATA_AUDIT_SIGNING_KEY", k.seed),
		apptest.Env("STRATA_PSEUDONYM_KEY", k.pseudonymKey), apptest.Env("STRATA_AUDIT_ANCHOR_FILE", k.anchorFile),
		apptest.Env("STRATA_AUDIT_ANCHOR_INTERVAL", "0")}, extra...)
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli.Main(ctx, args, func(string) string { return "" }, &out, &errOut)
	return code, out.String(), errOut.String()
}

type verifyWithAnchor struct {
	OK          bool `json:"ok"`
	FirstBroken *struct {
		Seq    int64  `json:"seq"`
		Reason string `json:"reason"`
	} `json:"first_broken"`
	Anchor *struct {
		Seq   int64  `json:"seq"`
		KeyID string `json:"key_id"`
	} `json:"anchor"`
	Unanchored int64 `json:"unanchored_records"`
}

// The whole outside check: anchors signed on demand land in the operator's file; the CLI
// verifies an export against them without the database; then a superuser rewrites a
// record and re-chains the whole log, and both the server's verify and the offline
// verifier report the break against the anchors.
func TestAuditAnchorsOutsideCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := newAuditKeys(t)
	s := apptest.Start(t, k.opts()...)
	admin := s.NewKey("acme", "admin")
	comp := s.NewKey("acme", "compliance")
	agent := s.NewKey("acme", "agent")
	for i := 0; i < 4; i++ {
		require.Equal(t, 201, s.Do("POST", "/v1/admin/keys", admin, map[string]any{"role": "agent", "name": "bot"}).Status)
	}
	require.Equal(t, 403, s.Do("POST", "/v1/audit/anchors", agent, nil).Status)
	require.Equal(t, 403, s.Do("GET", "/v1/audit/anchors", agent, nil).Status)
	r := s.Do("POST", "/v1/audit/anchors", comp, nil)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	an := r.Map(t)
	require.Equal(t, "acme", an["org_id"])
	require.GreaterOrEqual(t, an["seq"].(float64), 4.0)

	r = s.Do("GET", "/v1/audit/anchors", comp, nil)
	require.Equal(t, 200, r.Status)
	var list struct {
		Items []audit.Anchor `json:"items"`
	}
	r.JSON(t, &list)
	require.Len(t, list.Items, 1)
	pub, err := audit.ParsePublicKey(k.pub)
	require.NoError(t, err)
	require.NoError(t, list.Items[0].Check(audit.NewKeyring(pub)))
	sink, err := os.ReadFile(k.anchorFile)
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(sink, []byte("\n")), "one JSON line per anchor in the operator's file")

	// Outside check, fetching the export with a compliance key: intact (or unanchored, if
	// the chainer already linked the anchor request's own audit record).
	code, out, errOut := runCLI(t, "--url", s.URL, "--api-key", comp, "-o", "json", "audit", "verify", "--anchors", k.anchorFile, "--public-key", k.pub)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	var offline audit.OfflineReport
	require.NoError(t, json.Unmarshal([]byte(out), &offline), out)
	require.Contains(t, []string{audit.StatusIntact, audit.StatusUnanchored}, offline.Status)
	require.Nil(t, offline.FirstBroken)
	require.Equal(t, 1, offline.Anchors)
	require.LessOrEqual(t, offline.Unanchored, int64(1))
	// The anchor's own POST was audited after the anchor: one record newer than it.
	_, _, _ = runCLI(t, "--url", s.URL, "--api-key", comp, "audit", "verify")
	exportFile := filepath.Join(t.TempDir(), "audit.jsonl")
	code, out, errOut = runCLI(t, "--url", s.URL, "--api-key", comp, "audit", "export")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, os.WriteFile(exportFile, []byte(out), 0o600))
	// Offline, from the file alone (no server URL, no key).
	code, out, errOut = runCLI(t, "audit", "verify", "--anchors", k.anchorFile, "--public-key", k.pub, "--export", exportFile)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	require.Contains(t, out, "unanchored", "records newer than the newest anchor are not reported intact")
	require.Contains(t, errOut, "POST /v1/audit/anchors", "the note says what to do next")
	// A wrong public key is an error that says so.
	other, _ := audit.NewSigningKey()
	code, _, errOut = runCLI(t, "audit", "verify", "--anchors", k.anchorFile, "--public-key",
		audit.EncodePublicKey(audit.NewSigner(other).Public()), "--export", exportFile)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not among the public keys given")

	// A superuser rewrites record 2 and recomputes the whole chain with the server's own
	// algorithm, so every hash and link is consistent again.
	owner := testenv.OwnerConn(t, s.DBURL)
	tx, err := owner.Begin(ctx)
	require.NoError(t, err)
	for _, q := range []string{
		`SET LOCAL session_replication_role = replica`,
		`UPDATE audit_log SET actor_key_id = 'someone-else' WHERE org_id = 'acme' AND seq = 2`,
		`UPDATE audit_log SET seq = NULL, prev_hash = NULL, hash = NULL WHERE org_id = 'acme'`,
		`UPDATE audit_chain_heads SET seq = 0, hash = '' WHERE org_id = 'acme'`,
	} {
		_, err := tx.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	_, err = audit.Chain(ctx, tx, "acme", 100000)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	r = s.Do("GET", "/v1/audit/verify", comp, nil)
	require.Equal(t, 200, r.Status)
	var rep verifyWithAnchor
	r.JSON(t, &rep)
	require.False(t, rep.OK, "%s", r.Body)
	require.Contains(t, rep.FirstBroken.Reason, "re-chained")
	require.NotNil(t, rep.Anchor, "verify names the anchor it checked against")

	code, out, errOut = runCLI(t, "--url", s.URL, "--api-key", comp, "audit", "verify", "--anchors", k.anchorFile, "--public-key", k.pub)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	require.Contains(t, out, "broken")
	require.Contains(t, errOut, "re-chained")
}

// After a pseudonym key rotation (new key, old one kept as previous), the subject's older
// audit records are still found by user id, before and after the subject's erasure.
func TestAuditPseudonymRotationKeepsRecordsFindable(t *testing.T) {
	t.Parallel()
	k := newAuditKeys(t)
	s1 := apptest.Start(t, k.opts()...)
	agent := s1.NewKey("acme", "agent")
	comp := s1.NewKey("acme", "compliance")
	user := "rot-" + testenv.RandomID(6)
	require.Equal(t, 201, s1.Do("PUT", "/v1/kv/prefs/colour", agent, map[string]any{"value": "blue", "user_id": user}).Status)
	before := s1.Do("GET", "/v1/audit?user_id="+user, comp, nil).Map(t)["items"].([]any)
	require.NotEmpty(t, before)
	oldSubject := before[0].(map[string]any)["subject"].(string)

	// A second replica on the same database runs with the rotated key.
	newKey := audit.NewPseudonymKey()
	s2 := apptest.Start(t, k.opts(apptest.Env("STRATA_DATABASE_URL", s1.DBURL), apptest.Env("STRATA_REDIS_PREFIX", s1.Prefix),
		apptest.Env("STRATA_ADMIN_KEY", s1.AdminKey), apptest.Env("STRATA_PSEUDONYM_KEY", newKey),
		apptest.Env("STRATA_PSEUDONYM_PREVIOUS_KEYS", k.pseudonymKey))...)
	require.Equal(t, 200, s2.Do("PUT", "/v1/kv/prefs/colour", agent, map[string]any{"value": "red", "user_id": user}).Status)
	// The access request (Art. 15) answers the records of both keys.
	exp := s2.Do("GET", "/v1/gdpr/exports?user_id="+user, comp, nil)
	require.Equal(t, 200, exp.Status, "%s", exp.Body)
	exported := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(exp.Body)), "\n") {
		var rec struct {
			Tier string         `json:"tier"`
			Data map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec.Tier == "audit" {
			if sub, _ := rec.Data["subject"].(string); sub != "" {
				exported[sub]++
			}
		}
	}
	require.Contains(t, exported, oldSubject, "the export holds the records pseudonymised with the previous key")
	require.Contains(t, exported, audit.NewPseudonymizer(newKey).Subject("acme", user), "and those of the current key")
	r := s2.Do("POST", "/v1/gdpr/erasures", comp, map[string]any{"user_id": user})
	require.Equal(t, 202, r.Status, "%s", r.Body)
	waitErasure(t, s2, comp, r.Map(t)["id"].(string))

	items := s2.Do("GET", "/v1/audit?user_id="+user+"&limit=1000", comp, nil).Map(t)["items"].([]any)
	subjects := map[string]int{}
	for _, it := range items {
		subjects[it.(map[string]any)["subject"].(string)]++
	}
	require.Contains(t, subjects, oldSubject, "records pseudonymised with the previous key are still found")
	require.Len(t, subjects, 2, "and those of the current key")
	require.Equal(t, audit.NewPseudonymizer(newKey).Subject("acme", user), func() string {
		for sub := range subjects {
			if sub != oldSubject {
				return sub
			}
		}
		return ""
	}())
}

// A dump restored elsewhere without the keys holds pseudonyms nobody can map back: no key
// in the database turns the user id into them, and neither key appears in the dump.
func TestAuditDumpHoldsNoKeyMaterial(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("pg_dump"); err != nil {
		t.Fatal("pg_dump is not on PATH: install Postgres's client tools (postgresql-client-15; scripts/stores.sh installs the server with them)")
	}
	ctx := context.Background()
	k := newAuditKeys(t)
	s := apptest.Start(t, k.opts()...)
	agent := s.NewKey("acme", "agent")
	comp := s.NewKey("acme", "compliance")
	user := "dump-" + testenv.RandomID(6)
	require.Equal(t, 201, s.Do("PUT", "/v1/kv/prefs/colour", agent, map[string]any{"value": "blue", "user_id": user}).Status)
	require.Equal(t, 201, s.Do("POST", "/v1/audit/anchors", comp, nil).Status)

	dctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	dump, err := exec.CommandContext(dctx, "pg_dump", "--no-owner", "-d", s.DBURL).Output()
	require.NoError(t, err)
	require.NotContains(t, string(dump), k.pseudonymKey)
	require.NotContains(t, string(dump), k.seed)

	// Restore into another database (as a thief would) and try every setting as a key.
	restored := testenv.DatabaseURL(t)
	rc := testenv.OwnerConn(t, restored)
	_, err = rc.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)
	cmd := exec.CommandContext(dctx, "psql", "-q", "-v", "ON_ERROR_STOP=0", "-d", restored)
	cmd.Stdin = bytes.NewReader(dump)
	_, _ = cmd.CombinedOutput() // role grants of the dump may repeat what exists
	var subject string
	require.NoError(t, rc.QueryRow(ctx, `SELECT subject FROM audit_log WHERE org_id = 'acme' AND subject IS NOT NULL LIMIT 1`).Scan(&subject))
	require.Equal(t, audit.NewPseudonymizer(k.pseudonymKey).Subject("acme", user), subject, "only the key outside maps it")
	rows, err := rc.Query(ctx, `SELECT value FROM strata_settings`)
	require.NoError(t, err)
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, v := range values {
		require.NotEqual(t, subject, audit.NewPseudonymizer(v).Subject("acme", user), "a key stored in the database maps the subject")
	}
	var anchors int
	require.NoError(t, rc.QueryRow(ctx, `SELECT count(*) FROM audit_anchors`).Scan(&anchors))
	require.Equal(t, 1, anchors, "the restore holds the data")
	var raw int
	require.NoError(t, rc.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE strpos(audit_log::text, $1) > 0`, user).Scan(&raw))
	require.Zero(t, raw, "the audit trail holds no raw user id")
}
