// Package idempotency stores Idempotency-Key records. A record is claimed, and later
// completed with the response, inside the request's own Postgres transaction: a retry sees
// either nothing (the first attempt wrote nothing, so it is safe to run again) or exactly
// the committed response. Two concurrent requests with one key serialise on the record's
// primary key: the second waits for the first to commit or roll back (bounded by a lock
// timeout, then 409). A record belongs to the API key that made it (Binding): it is
// replayed to that key only; another key of the org reusing the key string is refused
// (ErrOtherKey) with nothing of the record.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-mem/strata/internal/pg"
)

// Errors Claim returns.
var (
	// ErrMismatch: the key was used before with another request (method, path or body).
	ErrMismatch = errors.New("idempotency key reused with a different request")
	// ErrInProgress: a request with the key is still running after the wait.
	ErrInProgress = errors.New("a request with this idempotency key is still in progress")
	// ErrOtherKey: the key has a record another API key made (same request or not: the
	// caller learns nothing of it).
	ErrOtherKey = errors.New("idempotency key held by another API key")
)

// Binding binds a record to the API key that made it: sha256 of the key's id and the
// request's fingerprint (stored as key_binding). Hashing the fingerprint in makes a
// binding stop matching when the record is taken over for another request by a server
// that does not bind (the previous release, during a rolling upgrade): such a record is
// replayed to nobody.
func Binding(apiKeyID string, fp []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "strata idempotency binding\n%s\n", apiKeyID)
	h.Write(fp)
	return h.Sum(nil)
}

// Response is a stored response.
type Response struct {
	Status  int
	Header  map[string][]string // the kept response headers (canonical names)
	Body    []byte
	Created time.Time
}

// ValidKey reports whether k is an acceptable Idempotency-Key: 1-255 visible ASCII.
func ValidKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// Fingerprint hashes what makes two requests "the same": method, path, query and body.
func Fingerprint(method, path, rawQuery string, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", method, path, rawQuery)
	h.Write(body)
	return h.Sum(nil)
}

// takeOverExpired ends a claim's insert: an expired record with the key is reset for the new
// request; a live one is left alone (the statement waits for its transaction, then returns
// no row for it).
const takeOverExpired = `ON CONFLICT (org_id, key) DO UPDATE SET request_hash = excluded.request_hash,
		key_binding = excluded.key_binding,
		method = excluded.method, path = excluded.path, user_id = excluded.user_id,
		response_status = 0, response_headers = '{}', response_body = '',
		created_at = now(), expires_at = excluded.expires_at
	WHERE idempotency_keys.expires_at < now()`

// claimSQL inserts the record, or takes over an expired one. A live record with the key
// makes it wait for that record's transaction, then return no row.
const claimSQL = `INSERT INTO idempotency_keys
		(org_id, key, request_hash, method, path, user_id, response_status, expires_at, key_binding)
	VALUES ($1, $2, $3, $4, $5, nullif($6, ''), 0, now() + make_interval(secs => $7), $8)
	` + takeOverExpired + `
	RETURNING true`

// ClaimStatements are Claim as statements for the front of the request's first round trip
// (pg.Session.AtBegin), so that the claim costs no round trip of its own: the claim fails
// (strata_expect_rows, 40001) unless it claimed the key, and then nothing queued behind it
// runs. A failed claim says only that the key was not claimed now; the caller rolls back
// and calls Claim in a new transaction, which replays the stored response, refuses a
// mismatch or reports the key in progress (a lock timeout, CodeLockNotAvailable, already
// says that). With a wait other than the pool's lock_timeout, the statements bound it
// around the claim as Claim does.
func ClaimStatements(org string, c Claimant, ttl, wait time.Duration) []pg.Statement {
	var out []pg.Statement
	bounded := wait != pg.LockTimeout
	if bounded {
		out = append(out, pg.Statement{SQL: fmt.Sprintf("SET LOCAL lock_timeout = %d", wait.Milliseconds())})
	}
	out = append(out, pg.Statement{SQL: `WITH c AS (` + claimSQL + `)
		SELECT strata_expect_rows((SELECT count(*) FROM c), 1, 'claiming idempotency key')`,
		Args: []any{org, c.Key, c.Hash, c.Method, c.Path, c.UserID, ttl.Seconds(), Binding(c.APIKeyID, c.Hash)}})
	if bounded {
		out = append(out, pg.Statement{SQL: fmt.Sprintf("SET LOCAL lock_timeout = %d", pg.LockTimeout.Milliseconds())})
	}
	return out
}

// Claim records c's key as in flight for this request inside tx. It returns (nil, nil) when
// the caller should execute the request; a stored Response to replay (only to the API key
// that made it); ErrOtherKey when another API key made the record; ErrMismatch when this
// key made it for another request; or ErrInProgress when a concurrent holder did not
// finish within wait.
func Claim(ctx context.Context, tx pgx.Tx, org string, c Claimant, ttl, wait time.Duration) (*Response, error) {
	key, fp := c.Key, c.Hash
	// One round trip: the wait bound, the claim, and the connection's own bound back (a
	// wait equal to the pool's lock_timeout needs neither).
	b := &pgx.Batch{}
	bounded := wait != pg.LockTimeout
	if bounded {
		b.Queue(fmt.Sprintf("SET LOCAL lock_timeout = %d", wait.Milliseconds()))
	}
	// Insert, or take over an expired record. A live record with the key makes this
	// statement wait for its transaction, then return no row.
	var claimed bool
	b.Queue(claimSQL, org, key, fp, c.Method, c.Path, c.UserID, ttl.Seconds(), Binding(c.APIKeyID, fp)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&claimed)
	})
	if bounded {
		b.Queue(fmt.Sprintf("SET LOCAL lock_timeout = %d", pg.LockTimeout.Milliseconds()))
	}
	err := tx.SendBatch(ctx, b).Close()
	if err == nil {
		return nil, nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pg.CodeLockNotAvailable {
		return nil, ErrInProgress
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, pg.Interpret(err)
	}
	var stored, binding []byte
	var hdr []byte
	r := &Response{}
	err = tx.QueryRow(ctx, `SELECT request_hash, key_binding, response_status, response_headers, response_body, created_at
		FROM idempotency_keys WHERE org_id = $1 AND key = $2`, org, key).Scan(&stored, &binding, &r.Status, &hdr, &r.Body, &r.Created)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	// NULL: a record of a server that did not bind (before migration 0046), replayed as
	// it was until it expires. Otherwise it must be this key's, for its stored request.
	if binding != nil && !bytes.Equal(binding, Binding(c.APIKeyID, stored)) {
		return nil, ErrOtherKey
	}
	if !bytes.Equal(stored, fp) {
		return nil, ErrMismatch
	}
	if err := json.Unmarshal(hdr, &r.Header); err != nil {
		return nil, fmt.Errorf("decoding stored headers: %w", err)
	}
	return r, nil
}

// replayedHeaders are the response headers a replay repeats.
var replayedHeaders = []string{"Content-Type", "Etag", "Location", "Content-Location"}

// keptHeaders is the JSON of the headers a replay repeats.
func keptHeaders(header map[string][]string) ([]byte, error) {
	keep := map[string][]string{}
	for _, h := range replayedHeaders { // canonical names, as an http.Header keeps them
		if v := header[h]; len(v) > 0 {
			keep[h] = v
		}
	}
	return json.Marshal(keep)
}

// Complete stores the response for key inside tx; it commits with the request's writes.
func Complete(ctx context.Context, tx pgx.Tx, org, key string, status int, header map[string][]string, body []byte) error {
	sql, args, err := CompleteStatement(org, key, status, header, body)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, sql, args...)
	return pg.Interpret(err)
}

// CompleteStatement is Complete as a statement and its arguments, for callers that send it
// in a pipeline of their own (the request path queues it with COMMIT:
// pg.Session.AtCommit). If the record vanished the statement itself fails (40001, a
// conflict), so the COMMIT behind it does not run.
func CompleteStatement(org, key string, status int, header map[string][]string, body []byte) (string, []any, error) {
	hdr, err := keptHeaders(header)
	if err != nil {
		return "", nil, err
	}
	return `WITH u AS (UPDATE idempotency_keys SET response_status = $3, response_headers = $4, response_body = $5
			WHERE org_id = $1 AND key = $2 RETURNING 1)
		SELECT strata_expect_rows((SELECT count(*) FROM u), 1, 'completing idempotency record')`,
		[]any{org, key, status, hdr, body}, nil
}

// Claimant is a request that claims its key (Claim, ClaimStatements, ClaimMany).
type Claimant struct {
	Key, Method, Path, UserID string
	APIKeyID                  string // the API key making the request: the record is bound to it (Binding)
	Hash                      []byte // Fingerprint of the request
}

// claimManySQL is Claim's insert for many keys of one org: it returns the keys it claimed
// (new, or taking over an expired record). A key that has a live record is not returned.
const claimManySQL = `INSERT INTO idempotency_keys
		(org_id, key, request_hash, method, path, user_id, response_status, expires_at, key_binding)
	SELECT $1, c.key, c.hash, c.method, c.path, nullif(c.usr, ''), 0, now() + make_interval(secs => $2), c.binding
	FROM unnest($3::text[], $4::bytea[], $5::text[], $6::text[], $7::text[], $8::bytea[]) AS c(key, hash, method, path, usr, binding)
	ORDER BY c.key
	` + takeOverExpired + `
	RETURNING key`

// ClaimManyStatement is the statement and arguments that claim the keys of cs (distinct
// keys, one org) in a group commit's transaction; it returns one row per key claimed. The
// keys not returned have a live record: those requests go the single-request way (Claim),
// which replays, refuses a mismatch or waits. A key another transaction holds makes the
// statement wait, bounded by the transaction's lock_timeout.
func ClaimManyStatement(org string, cs []Claimant, ttl time.Duration) (string, []any) {
	keys, hashes := make([]string, len(cs)), make([][]byte, len(cs))
	methods, paths, users := make([]string, len(cs)), make([]string, len(cs)), make([]string, len(cs))
	bindings := make([][]byte, len(cs))
	for i, c := range cs {
		keys[i], hashes[i], methods[i], paths[i], users[i] = c.Key, c.Hash, c.Method, c.Path, c.UserID
		bindings[i] = Binding(c.APIKeyID, c.Hash)
	}
	return claimManySQL, []any{org, ttl.Seconds(), keys, hashes, methods, paths, users, bindings}
}

// Completion is one request's response for CompleteManyStatement.
type Completion struct {
	Key    string
	Status int
	Header map[string][]string
	Body   []byte
}

// CompleteManyStatement is CompleteStatement for many keys of one org, in one statement;
// it fails (so the COMMIT behind it does not run) unless every record was there.
func CompleteManyStatement(org string, cs []Completion) (string, []any, error) {
	keys, statuses := make([]string, len(cs)), make([]int32, len(cs))
	hdrs, bodies := make([]string, len(cs)), make([][]byte, len(cs))
	for i, c := range cs {
		h, err := keptHeaders(c.Header)
		if err != nil {
			return "", nil, err
		}
		keys[i], statuses[i], hdrs[i], bodies[i] = c.Key, int32(c.Status), string(h), c.Body
	}
	return `WITH u AS (UPDATE idempotency_keys k SET response_status = v.status, response_headers = v.hdr,
			response_body = v.body
		FROM unnest($2::text[], $3::int[], $4::jsonb[], $5::bytea[]) AS v(key, status, hdr, body)
		WHERE k.org_id = $1 AND k.key = v.key RETURNING 1)
		SELECT strata_expect_rows((SELECT count(*) FROM u), $6, 'completing idempotency records')`,
		[]any{org, keys, statuses, hdrs, bodies, len(cs)}, nil
}
