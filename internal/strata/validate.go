package strata

import (
	"bytes"
	"encoding/json"
	"strings"
)

// MaxIDLen is the longest client-chosen id (DESIGN.md: 1-200 chars of [A-Za-z0-9._:-]).
const MaxIDLen = 200

// IDPattern is the JSON-schema pattern for client-chosen ids.
const IDPattern = `^[A-Za-z0-9._:-]{1,200}$`

// ValidID reports whether s is a legal client-chosen id.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// CheckID returns a 422 FieldError unless s is a legal id. An empty optional id is fine
// when optional is true.
func CheckID(field, s string, optional bool) error {
	if s == "" && optional {
		return nil
	}
	if !ValidID(s) {
		return Invalid(field, "must be 1-%d characters of A-Z a-z 0-9 . _ : -", MaxIDLen)
	}
	return nil
}

// CheckText refuses strings Postgres cannot store (NUL characters, SQLSTATE 22021).
func CheckText(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return Invalid(field, "must not contain NUL characters")
	}
	return nil
}

// CheckJSON refuses JSON Postgres' jsonb cannot store: the \u0000 escape anywhere in it.
// raw may be nil (absent).
func CheckJSON(field string, raw json.RawMessage) error {
	if bytes.Contains(raw, []byte(`\u0000`)) {
		// A literal backslash followed by u0000 inside a string is encoded as \\u0000;
		// only an odd run of backslashes before "u0000" is a real escape.
		if hasNULEscape(raw) {
			return Invalid(field, `must not contain \u0000 (NUL) characters`)
		}
	}
	if bytes.IndexByte(raw, 0) >= 0 {
		return Invalid(field, "must not contain NUL characters")
	}
	return nil
}

func hasNULEscape(raw []byte) bool {
	for i := 0; i+6 <= len(raw); i++ {
		if raw[i] != '\\' || string(raw[i+1:i+6]) != "u0000" {
			continue
		}
		n := 0
		for j := i; j >= 0 && raw[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 {
			return true
		}
	}
	return false
}
