package audit

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"strings"
)

// Keys live outside the database (docs/compliance.md, "Keys"): the pseudonym key that turns
// user ids into audit pseudonyms and the Ed25519 key that signs chain anchors come from
// the environment or from files the environment names, so a dump of the database holds
// neither.

// ReadSecret returns s, or the contents of the file s names when s starts with "/", "./"
// or "file:" (trailing whitespace trimmed). A value starting with "/" that names no file
// and is valid base64 is a key, not a path.
func ReadSecret(s string) (string, error) {
	s = strings.TrimSpace(s)
	path := ""
	switch {
	case strings.HasPrefix(s, "file:"):
		path = strings.TrimPrefix(s, "file:")
	case strings.HasPrefix(s, "/"), strings.HasPrefix(s, "./"):
		path = s
	}
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		// A standard-base64 key may itself start with "/" (one key in 64): when no such
		// file exists and the value decodes as base64, it is the value.
		if _, derr := base64.StdEncoding.DecodeString(s); derr == nil && path == s && errors.Is(err, fs.ErrNotExist) {
			return s, nil
		}
		return "", fmt.Errorf("reading key file %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ParsePrivateKey reads an Ed25519 private key: a PEM "PRIVATE KEY" (PKCS #8, as
// `openssl genpkey -algorithm ed25519` writes), or base64/hex of the 32-byte seed or the
// 64-byte key; s may name a file (ReadSecret).
func ParsePrivateKey(s string) (ed25519.PrivateKey, error) {
	v, err := ReadSecret(s)
	if err != nil {
		return nil, err
	}
	if blk, _ := pem.Decode([]byte(v)); blk != nil {
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM private key: %w", err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, errors.New("PEM private key is not Ed25519 (generate one with: openssl genpkey -algorithm ed25519)")
		}
		return ek, nil
	}
	b := decodeKeyBytes(v)
	switch len(b) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(b), nil
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(b), nil
	}
	return nil, errors.New("not an Ed25519 private key: give a PEM file (openssl genpkey -algorithm ed25519) or base64 of a 32-byte seed (strata audit keygen)")
}

// ParsePublicKey reads an Ed25519 public key: PEM "PUBLIC KEY" (PKIX), or base64/hex of
// the 32 bytes; s may name a file (ReadSecret).
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	v, err := ReadSecret(s)
	if err != nil {
		return nil, err
	}
	if blk, _ := pem.Decode([]byte(v)); blk != nil {
		if blk.Type == "PRIVATE KEY" {
			priv, err := ParsePrivateKey(v)
			if err != nil {
				return nil, err
			}
			return priv.Public().(ed25519.PublicKey), nil
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM public key: %w", err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, errors.New("PEM public key is not Ed25519")
		}
		return ek, nil
	}
	if b := decodeKeyBytes(v); len(b) == ed25519.PublicKeySize {
		return ed25519.PublicKey(b), nil
	}
	return nil, errors.New("not an Ed25519 public key: give a PEM file or base64 of the 32 bytes (the public_key the server prints, or GET /v1/audit/anchors' public_key)")
}

func decodeKeyBytes(v string) []byte {
	if b, err := hex.DecodeString(v); err == nil {
		return b
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(v); err == nil {
			return b
		}
	}
	return nil
}

// KeyID names a public key in anchors: the first 8 bytes of its SHA-256, hex.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// EncodePublicKey is pub as base64 (what STRATA_AUDIT_VERIFY_KEYS and --public-key take).
func EncodePublicKey(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// NewSigningKey generates an Ed25519 key and returns it with its seed in base64 (what
// STRATA_AUDIT_SIGNING_KEY takes).
func NewSigningKey() (ed25519.PrivateKey, string) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return priv, base64.StdEncoding.EncodeToString(priv.Seed())
}

// NewPseudonymKey is a fresh random pseudonym key, hex.
func NewPseudonymKey() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Keyring is the set of public keys anchors are verified with, by key id.
type Keyring map[string]ed25519.PublicKey

// NewKeyring holds pubs.
func NewKeyring(pubs ...ed25519.PublicKey) Keyring {
	k := Keyring{}
	for _, p := range pubs {
		k[KeyID(p)] = p
	}
	return k
}

// ParseKeyring reads a comma-separated list of public keys (ParsePublicKey each).
func ParseKeyring(list string) (Keyring, error) {
	k := Keyring{}
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		p, err := ParsePublicKey(s)
		if err != nil {
			return nil, err
		}
		k[KeyID(p)] = p
	}
	return k, nil
}

// WithPrevious makes p also recognise pseudonyms made with previous keys (hex or raw, as
// NewPseudonymizer): after a rotation Subjects returns the pseudonyms a subject's older
// records carry, so lookups by user id (audit filter, export, erasure receipts) still
// find them. New pseudonyms are always made with the current key.
func (p *Pseudonymizer) WithPrevious(keys ...string) *Pseudonymizer {
	q := &Pseudonymizer{key: p.key, previous: append([][]byte(nil), p.previous...)}
	for _, k := range keys {
		if strings.TrimSpace(k) == "" {
			continue
		}
		q.previous = append(q.previous, NewPseudonymizer(strings.TrimSpace(k)).key)
	}
	return q
}

// Subjects is every pseudonym org's user may carry: the current key's first, then one per
// previous key. nil for "".
func (p *Pseudonymizer) Subjects(org, userID string) []string {
	if userID == "" {
		return nil
	}
	out := []string{p.Subject(org, userID)}
	for _, k := range p.previous {
		out = append(out, subjectWith(k, org, userID))
	}
	return out
}

// Hash is a keyed hash of an id for names outside the database (Redis key names): the
// current key's pseudonym under a separate label, so a key name never carries the raw id
// and is not the audit pseudonym either.
func (p *Pseudonymizer) Hash(org, id string) string {
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte("strata-name\x00"))
	m.Write([]byte(org))
	m.Write([]byte{0})
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

func subjectWith(key []byte, org, userID string) string {
	return pseudonym(hmac.New(sha256.New, key), org, userID)
}

// pseudonym is the first 16 bytes, in hex, of m's MAC over org and userID.
func pseudonym(m hash.Hash, org, userID string) string {
	m.Write([]byte(org))
	m.Write([]byte{0})
	m.Write([]byte(userID))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:16])
}
