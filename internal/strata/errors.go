package strata

import (
	"errors"
	"fmt"
)

// Sentinel errors. Stores translate driver errors (pgx.ErrNoRows, redis.Nil, unique
// violations, connection failures) into these at their boundary; the HTTP layer maps them
// to problems in one place.
var (
	// ErrNotFound: the entity does not exist in the caller's org. Another org's entity is
	// reported the same way, so existence never leaks across tenants.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a version, lease, fencing token or uniqueness precondition failed.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: a store could not be reached or timed out; the request may be retried.
	ErrUnavailable = errors.New("store unavailable")
	// ErrForbidden: the caller's role may not do this.
	ErrForbidden = errors.New("forbidden")
)

// FieldError is bad input in one named field. Tiers name the field bare ("text",
// "params[3].op", "session") and say what is wrong with it by Kind; the transport adds where
// the field travelled and picks its answer (httpapi: body./path./query., 422/400/413/404).
type FieldError struct {
	Field string // bare ("text", "[3].op") or, from the transport itself, located ("header.If-Match")
	Msg   string
	// Status is an HTTP status set by the transport for its own errors (0: from Kind). Tiers
	// leave it alone and set Kind.
	Status int
	Kind   FieldKind
}

// FieldKind is what is wrong with a field.
type FieldKind int

const (
	// FieldInvalid: the value is well-formed but not acceptable (the default).
	FieldInvalid FieldKind = iota
	// FieldMalformed: the value could not be parsed at all.
	FieldMalformed
	// FieldTooLarge: the value is larger than a configured limit.
	FieldTooLarge
	// FieldNotFound: the value names something that does not exist.
	FieldNotFound
)

// TooLarge returns a FieldError of kind FieldTooLarge for field.
func TooLarge(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Kind: FieldTooLarge}
}

// Malformed returns a FieldError of kind FieldMalformed for field.
func Malformed(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Kind: FieldMalformed}
}

// NoSuch returns a FieldError of kind FieldNotFound for field.
func NoSuch(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Kind: FieldNotFound}
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Msg) }

// Invalid returns a 422 FieldError for field.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Status: 422}
}

// ConflictError is an ErrConflict with a human message and optional details that are safe
// to show the caller (current version, lease holder, ...).
type ConflictError struct {
	Msg     string
	Details map[string]any
}

func (e *ConflictError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Conflict builds a ConflictError.
func Conflict(msg string, details map[string]any) error {
	return &ConflictError{Msg: msg, Details: details}
}

// UnavailableError is an ErrUnavailable naming the store that failed.
type UnavailableError struct {
	Store string // "postgres" or "redis"
	Err   error
}

func (e *UnavailableError) Error() string { return e.Store + " unavailable: " + e.Err.Error() }

// Unwrap exposes both the sentinel and the cause.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// ErrRestricted: processing of the data subject's data is restricted (GDPR Art. 18); the
// data is kept but not served until the restriction is lifted.
var ErrRestricted = errors.New("processing of this data subject's data is restricted")
