package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/strata-mem/strata/internal/strata"
)

// SecretPrefix starts every signing secret (the Standard Webhooks convention: "whsec_" and
// the key in base64).
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret (24 random bytes).
func NewSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// secretKey is the HMAC key of a secret: its base64 part decoded.
func secretKey(secret string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
}

// CheckSecret validates a secret a caller gives: "whsec_" and 24 to 64 bytes in base64.
func CheckSecret(field, secret string) error {
	if !strings.HasPrefix(secret, SecretPrefix) {
		return strata.Invalid(field, `must start with "whsec_" followed by the key in base64`)
	}
	k, err := secretKey(secret)
	if err != nil {
		return strata.Invalid(field, "the part after whsec_ is not base64")
	}
	if len(k) < 24 || len(k) > 64 {
		return strata.Invalid(field, "the key must be 24 to 64 bytes")
	}
	return nil
}

// Sign is the webhook-signature header for a message (Standard Webhooks): "v1," and the
// base64 HMAC-SHA256, keyed with the secret's key, of "id.timestamp.body".
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	k, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}

// Verify reports whether header (a webhook-signature, possibly several space-separated
// signatures) signs the message with secret. Receivers in Go can use it as it is.
func Verify(secret, id string, timestamp int64, body []byte, header string) bool {
	want, err := Sign(secret, id, timestamp, body)
	if err != nil {
		return false
	}
	for _, sig := range strings.Fields(header) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}
