package working

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/strata"
)

// Bad writes are FieldErrors with bare names ("state", not "body.state") and a kind, never
// an HTTP status: the transport adds both the location and the status.
func TestBadInputNamesBareFields(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{MaxStateBytes: 64, MaxDepth: 3})
	deep := json.RawMessage(`{"a":{"b":{"c":{"d":1}}}}`)
	for _, c := range []struct {
		name  string
		write func(tx pgx.Tx) error
		field string
		kind  strata.FieldKind
	}{
		{"session", func(tx pgx.Tx) error {
			_, _, err := b.store.Put(b.ctx, tx, "acme", "no spaces", Write{State: json.RawMessage(`{}`)})
			return err
		}, "session", strata.FieldInvalid},
		{"state absent", func(tx pgx.Tx) error {
			_, _, err := b.store.Put(b.ctx, tx, "acme", "s", Write{})
			return err
		}, "state", strata.FieldInvalid},
		{"state array", func(tx pgx.Tx) error {
			_, _, err := b.store.Put(b.ctx, tx, "acme", "s", Write{State: json.RawMessage(`[1]`)})
			return err
		}, "state", strata.FieldInvalid},
		{"state too deep", func(tx pgx.Tx) error {
			_, _, err := b.store.Put(b.ctx, tx, "acme", "s", Write{State: deep})
			return err
		}, "state", strata.FieldInvalid},
		{"state too large", func(tx pgx.Tx) error {
			_, _, err := b.store.Put(b.ctx, tx, "acme", "s", Write{State: json.RawMessage(`{"a":"` + strings.Repeat("x", 100) + `"}`)})
			return err
		}, "state", strata.FieldTooLarge},
		{"patch NUL", func(tx pgx.Tx) error {
			_, _, err := b.store.Patch(b.ctx, tx, "acme", "s", Write{State: json.RawMessage(`{"a":"\u0000"}`)})
			return err
		}, "state", strata.FieldInvalid},
		{"ttl", func(tx pgx.Tx) error {
			_, _, err := b.store.Put(b.ctx, tx, "acme", "s", Write{State: json.RawMessage(`{}`), TTL: -time.Second})
			return err
		}, "ttl_seconds", strata.FieldInvalid},
		{"role", func(tx pgx.Tx) error {
			_, err := b.store.Append(b.ctx, tx, "acme", "s", NewTurn{Role: "robot", Content: "hi"})
			return err
		}, "role", strata.FieldInvalid},
		{"content NUL", func(tx pgx.Tx) error {
			_, err := b.store.Append(b.ctx, tx, "acme", "s", NewTurn{Role: "user", Content: "a\x00"})
			return err
		}, "content", strata.FieldInvalid},
		{"content too large", func(tx pgx.Tx) error {
			_, err := b.store.Append(b.ctx, tx, "acme", "s", NewTurn{Role: "user", Content: strings.Repeat("x", 65)})
			return err
		}, "content", strata.FieldTooLarge},
		{"metadata", func(tx pgx.Tx) error {
			_, err := b.store.Append(b.ctx, tx, "acme", "s", NewTurn{Role: "user", Content: "hi", Metadata: json.RawMessage(`"m"`)})
			return err
		}, "metadata", strata.FieldInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := b.inTx("acme", c.write)
			var fe *strata.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, c.field, fe.Field, "%v", err)
			require.Equal(t, c.kind, fe.Kind, "%v", err)
		})
	}
	// A patch that would grow the document past the cap is refused the same way.
	require.NoError(t, b.inTx("acme", func(tx pgx.Tx) error {
		_, _, err := b.store.Put(b.ctx, tx, "acme", "s", Write{State: json.RawMessage(`{"a":1}`)})
		return err
	}))
	err := b.inTx("acme", func(tx pgx.Tx) error {
		_, _, err := b.store.Patch(b.ctx, tx, "acme", "s", Write{State: json.RawMessage(`{"b":"` + strings.Repeat("y", 58) + `"}`)})
		return err
	})
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "state", fe.Field)
	require.Equal(t, strata.FieldTooLarge, fe.Kind)
}
