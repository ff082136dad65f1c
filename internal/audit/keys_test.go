package audit_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
)

var errEOF = io.EOF

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	priv, seed := audit.NewSigningKey()
	got, err := audit.ParsePrivateKey(seed)
	require.NoError(t, err)
	require.True(t, priv.Equal(got))

	der, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "signing.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))
	got, err = audit.ParsePrivateKey(path)
	require.NoError(t, err)
	require.True(t, priv.Equal(got))

	pub := priv.Public().(ed25519.PublicKey)
	pder, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	ppath := filepath.Join(dir, "public.pem")
	require.NoError(t, os.WriteFile(ppath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), 0o600))
	ring, err := audit.ParseKeyring(ppath + "," + audit.EncodePublicKey(pub))
	require.NoError(t, err)
	require.Len(t, ring, 1)
	require.Contains(t, ring, audit.KeyID(pub))

	_, err = audit.ParsePrivateKey("not a key")
	require.ErrorContains(t, err, "strata audit keygen")
	_, err = audit.ParsePrivateKey("/does/not/exist")
	require.ErrorContains(t, err, "/does/not/exist")
}

func TestPseudonymRotation(t *testing.T) {
	t.Parallel()
	oldKey := audit.NewPseudonymKey()
	old := audit.NewPseudonymizer(oldKey)
	cur := audit.NewPseudonymizer(audit.NewPseudonymKey()).WithPrevious(oldKey)
	subs := cur.Subjects("o", "u1")
	require.Len(t, subs, 2)
	require.Equal(t, cur.Subject("o", "u1"), subs[0], "new pseudonyms use the current key")
	require.Equal(t, old.Subject("o", "u1"), subs[1], "old pseudonyms stay resolvable")
	require.NotEqual(t, subs[0], subs[1])
	require.NotContains(t, cur.Hash("o", "u1"), "u1")
	require.NotEqual(t, cur.Hash("o", "u1"), subs[0], "Redis names are not the audit pseudonym")
	require.Nil(t, cur.Subjects("o", ""))
}

// TestReadSecretSlashLeadingBase64 is a key whose base64 starts with "/" (one in 64): it
// names no file, so it is the key itself; a missing file that is not base64 is still an
// error naming the file.
func TestReadSecretSlashLeadingBase64(t *testing.T) {
	t.Parallel()
	const key = "/d5sh4PxhI+f/UPCtT7mJjWglm487VAKyY1H3uuiaVg="
	v, err := audit.ReadSecret(key)
	require.NoError(t, err)
	require.Equal(t, key, v)
	_, err = audit.ParsePublicKey(key)
	require.NoError(t, err)
	_, err = audit.ReadSecret("/no/such/key.pem")
	require.ErrorContains(t, err, "reading key file /no/such/key.pem")
}
