// Package audit owns the audit log: who wrote what, with which key and agent, when, for
// which (pseudonymised) data subject. Rows are appended inside the transaction of the
// write they describe, so a write and its audit record commit or vanish together. The log
// is append-only in the database and hash-chained per org by a chainer that links committed
// rows in order shortly after they commit (a per-org lock at write time would serialise
// every write of an org). Verify walks a chain and names the first broken link. Subjects
// are kept only as keyed HMACs, so erasing a subject never rewrites the chain and the trail
// holds no personal data.
package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Entry is what a caller records.
type Entry struct {
	OrgID      string
	ActorKeyID string
	ActorRole  string
	AgentID    string
	Action     string // operation id, e.g. "append-events", or a worker action such as "evict"
	EntityType string
	EntityID   string
	RequestID  string
	Subject    string // a pseudonym from Pseudonymizer.Subject, never a raw user id
	Status     int
	Details    map[string]any // ids, counts, reasons: never memory content
}

// Record is a stored entry.
type Record struct {
	ID         int64          `json:"id"`
	Seq        *int64         `json:"seq,omitempty" doc:"Position in the org's hash chain (absent until chained, normally within a second)."`
	At         time.Time      `json:"at"`
	ActorKeyID string         `json:"actor_key_id"`
	ActorRole  string         `json:"actor_role"`
	AgentID    string         `json:"agent_id,omitempty"`
	Action     string         `json:"action"`
	EntityType string         `json:"entity_type"`
	EntityID   string         `json:"entity_id,omitempty"`
	RequestID  string         `json:"request_id,omitempty"`
	Subject    string         `json:"subject,omitempty" doc:"Keyed HMAC of the data subject's user_id."`
	Status     int            `json:"status,omitempty"`
	Details    map[string]any `json:"details,omitempty"`
	Hash       string         `json:"hash,omitempty"`
	PrevHash   string         `json:"prev_hash,omitempty"`
}

// Append inserts e in q's transaction.
func Append(ctx context.Context, q pg.DBTX, e Entry) error {
	sql, args, err := Insert(e)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, sql, args...)
	return pg.Interpret(err)
}

// insertSQL is the statement Append runs.
const insertSQL = `INSERT INTO audit_log (org_id, actor_key_id, actor_role, agent_id, action, entity_type,
			entity_id, request_id, subject, status, details)
		VALUES ($1, $2, $3, nullif($4, ''), $5, $6, nullif($7, ''), nullif($8, ''), nullif($9, ''), nullif($10, 0), $11)`

// Insert is the statement and arguments that append e, for callers that send it in a
// pipeline of their own (the request path queues it with COMMIT: pg.Session.AtCommit).
func Insert(e Entry) (string, []any, error) {
	d, err := e.details()
	if err != nil {
		return "", nil, err
	}
	return insertSQL, []any{e.OrgID, e.ActorKeyID, e.ActorRole, e.AgentID, e.Action, e.EntityType, e.EntityID, e.RequestID,
		e.Subject, e.Status, d}, nil
}

// Pseudonymizer turns user ids into stable pseudonyms with a secret key.
type Pseudonymizer struct {
	key      []byte
	previous [][]byte // WithPrevious
	// macs are HMACs under key, reset and reused: a new one costs about six allocations,
	// on every audited request that names a data subject.
	macs sync.Pool
}

// NewPseudonymizer uses key (hex or raw bytes).
func NewPseudonymizer(key string) *Pseudonymizer {
	if b, err := hex.DecodeString(key); err == nil && len(b) >= 16 {
		return &Pseudonymizer{key: b}
	}
	return &Pseudonymizer{key: []byte(key)}
}

// LoadPseudonymizer reads the key an older release kept in the database (migration 0007).
// Only development mode uses it (and only when STRATA_PSEUDONYM_KEY is unset); production
// takes its key from the environment (docs/compliance.md, "Keys").
func LoadPseudonymizer(ctx context.Context, q pg.DBTX) (*Pseudonymizer, error) {
	var k string
	if err := q.QueryRow(ctx, `SELECT value FROM strata_settings WHERE name = 'audit_hmac_key'`).Scan(&k); err != nil {
		return nil, fmt.Errorf("reading the audit key: %w", pg.Interpret(err))
	}
	return NewPseudonymizer(k), nil
}

// Subject is the pseudonym of org's user; "" for "".
func (p *Pseudonymizer) Subject(org, userID string) string {
	if userID == "" {
		return ""
	}
	m, _ := p.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, p.key)
	} else {
		m.Reset()
	}
	defer p.macs.Put(m)
	return pseudonym(m, org, userID)
}

type chainRow struct {
	id                                                int64
	at                                                time.Time
	actor, role, agent, action, etype, eid, rid, subj string
	status                                            int
	details                                           string
}

// rowHash is sha256(prev || seq || canonical fields). details is jsonb's text form, which
// Postgres renders the same way for the same value.
func rowHash(prev []byte, org string, seq int64, r chainRow) []byte {
	h := sha256.New()
	h.Write(prev)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seq))
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(r.id))
	h.Write(b[:])
	for _, f := range []string{org, r.at.UTC().Format(time.RFC3339Nano), r.actor, r.role, r.agent, r.action,
		r.etype, r.eid, r.rid, r.subj, fmt.Sprint(r.status), r.details} {
		binary.BigEndian.PutUint64(b[:], uint64(len(f)))
		h.Write(b[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

const chainCols = `id, at, actor_key_id, actor_role, coalesce(agent_id, ''), action, entity_type,
	coalesce(entity_id, ''), coalesce(request_id, ''), coalesce(subject, ''), coalesce(status, 0), details::text`

func scanChainRow(rows pgx.CollectableRow) (chainRow, error) {
	var r chainRow
	err := rows.Scan(&r.id, &r.at, &r.actor, &r.role, &r.agent, &r.action, &r.etype, &r.eid, &r.rid, &r.subj, &r.status, &r.details)
	return r, err
}

// Chain links up to limit of org's committed, unchained rows onto the org's chain, in id
// order, inside tx (which must run for org). Concurrent chainers serialise on the head row.
func Chain(ctx context.Context, tx pgx.Tx, org string, limit int) (int, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO audit_chain_heads (org_id, seq, hash) VALUES ($1, 0, '') ON CONFLICT DO NOTHING`, org); err != nil {
		return 0, pg.Interpret(err)
	}
	var seq int64
	var head []byte
	if err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_chain_heads WHERE org_id = $1 FOR UPDATE`, org).Scan(&seq, &head); err != nil {
		return 0, pg.Interpret(err)
	}
	rows, err := tx.Query(ctx, `SELECT `+chainCols+` FROM audit_log WHERE org_id = $1 AND hash IS NULL ORDER BY id LIMIT $2`, org, limit)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	pending, err := pgx.CollectRows(rows, scanChainRow)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	if len(pending) == 0 {
		return 0, nil
	}
	// One UPDATE links the whole batch (a statement per row cost Postgres more than the
	// rows themselves), the head moves in the same round trip. Its rows are found through
	// the unchained index (hash IS NULL), which holds the batch and little else: keyed by
	// org alone, an unanalysed partition's plan joined the ids to every row of the org.
	ids, seqs := make([]int64, len(pending)), make([]int64, len(pending))
	prevs, hashes := make([][]byte, len(pending)), make([][]byte, len(pending))
	for i, r := range pending {
		seq++
		h := rowHash(head, org, seq, r)
		ids[i], seqs[i], prevs[i], hashes[i] = r.id, seq, head, h
		head = h
	}
	batch := &pgx.Batch{}
	batch.Queue(`WITH u AS (UPDATE audit_log a SET seq = v.seq, prev_hash = v.prev, hash = v.hash
			FROM unnest($2::bigint[], $3::bigint[], $4::bytea[], $5::bytea[]) AS v(id, seq, prev, hash)
			WHERE a.org_id = $1 AND a.hash IS NULL AND a.id = v.id RETURNING 1)
		SELECT strata_expect_rows((SELECT count(*) FROM u), $6, 'chaining audit records')`,
		org, ids, seqs, prevs, hashes, len(pending))
	batch.Queue(`UPDATE audit_chain_heads SET seq = $2, hash = $3 WHERE org_id = $1`, org, seq, head)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return 0, pg.Interpret(err)
	}
	return len(pending), nil
}

// Report is the result of verifying a chain.
type Report struct {
	OK          bool       `json:"ok"`
	Checked     int64      `json:"checked" doc:"Chained records checked."`
	Unchained   int64      `json:"unchained" doc:"Records not yet chained (written in the last moments)."`
	HeadSeq     int64      `json:"head_seq"`
	FirstBroken *BrokenRef `json:"first_broken,omitempty"`
	// Anchors (VerifyAnchored).
	Anchor              *AnchorRef `json:"anchor,omitempty" doc:"The newest signed anchor the chain was checked against."`
	Unanchored          int64      `json:"unanchored_records" doc:"Chained records newer than the newest anchor checked."`
	UnverifiableAnchors int64      `json:"unverifiable_anchors,omitempty" doc:"Anchors signed by a key this server does not know (add it to STRATA_AUDIT_VERIFY_KEYS)."`
}

// BrokenRef names the first link that does not verify.
type BrokenRef struct {
	Seq    int64  `json:"seq"`
	ID     int64  `json:"id,omitempty"`
	Reason string `json:"reason"`
}

// Verify walks org's chain in seq order, recomputing every hash, and checks the sequence
// has no gaps and ends at the recorded head.
func Verify(ctx context.Context, tx pgx.Tx, org string) (Report, error) {
	var rep Report
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE org_id = $1 AND hash IS NULL`, org).Scan(&rep.Unchained); err != nil {
		return rep, pg.Interpret(err)
	}
	var headHash []byte
	err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_chain_heads WHERE org_id = $1`, org).Scan(&rep.HeadSeq, &headHash)
	if err != nil && err != pgx.ErrNoRows {
		return rep, pg.Interpret(err)
	}
	rows, err := tx.Query(ctx, `SELECT seq, prev_hash, hash, `+chainCols+` FROM audit_log
		WHERE org_id = $1 AND seq IS NOT NULL ORDER BY seq`, org)
	if err != nil {
		return rep, pg.Interpret(err)
	}
	defer rows.Close()
	var prev []byte
	var expect int64 = 1
	broken := func(seq, id int64, reason string) {
		if rep.FirstBroken == nil {
			rep.FirstBroken = &BrokenRef{Seq: seq, ID: id, Reason: reason}
		}
	}
	for rows.Next() {
		var seq int64
		var ph, h []byte
		var r chainRow
		if err := rows.Scan(&seq, &ph, &h, &r.id, &r.at, &r.actor, &r.role, &r.agent, &r.action, &r.etype, &r.eid,
			&r.rid, &r.subj, &r.status, &r.details); err != nil {
			return rep, pg.Interpret(err)
		}
		rep.Checked++
		switch {
		case seq != expect:
			broken(expect, 0, fmt.Sprintf("record %d of the chain is missing", expect))
		case !hmac.Equal(ph, prev):
			broken(seq, r.id, "prev_hash does not match the previous record")
		case !hmac.Equal(h, rowHash(prev, org, seq, r)):
			broken(seq, r.id, "the record's content does not match its hash (edited)")
		}
		prev, expect = h, seq+1
	}
	if err := rows.Err(); err != nil {
		return rep, pg.Interpret(err)
	}
	if rep.HeadSeq != expect-1 {
		broken(expect, 0, fmt.Sprintf("the chain ends at %d but its head says %d (records removed)", expect-1, rep.HeadSeq))
	} else if rep.HeadSeq > 0 && !hmac.Equal(headHash, prev) {
		broken(rep.HeadSeq, 0, "the last record does not match the chain head")
	}
	rep.OK = rep.FirstBroken == nil
	return rep, nil
}

// Filter selects records for List.
type Filter struct {
	Action, EntityType, EntityID, ActorKeyID, AgentID, Subject string
	Subjects                                                   []string // any of these pseudonyms (after a key rotation); with Subject
	Since, Until                                               *time.Time
	AfterID                                                    int64
	Limit                                                      int
	// Newest lists newest first; AfterID is then the previous page's last (oldest) id.
	Newest bool
}

// ParseCursor reads a page cursor of List (the previous page's last record id; "": from
// the first).
func ParseCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(c, 10, 64)
	if err != nil || id < 0 {
		return 0, strata.Invalid("cursor", "is not a cursor this API returned")
	}
	return id, nil
}

// List returns org's records matching f in id order (newest first with f.Newest).
func List(ctx context.Context, q pg.DBTX, org string, f Filter) ([]Record, error) {
	after, order := "id > $2", "id"
	if f.Newest {
		after, order = "id < $2", "id DESC"
		if f.AfterID == 0 {
			f.AfterID = math.MaxInt64
		}
	}
	rows, err := q.Query(ctx, `SELECT id, seq, at, actor_key_id, actor_role, coalesce(agent_id, ''), action, entity_type,
			coalesce(entity_id, ''), coalesce(request_id, ''), coalesce(subject, ''), coalesce(status, 0), details,
			coalesce(encode(hash, 'hex'), ''), coalesce(encode(prev_hash, 'hex'), '')
		FROM audit_log
		WHERE org_id = $1 AND `+after+`
		  AND ($3 = '' OR action = $3) AND ($4 = '' OR entity_type = $4) AND ($5 = '' OR entity_id = $5)
		  AND ($6 = '' OR actor_key_id = $6) AND ($7 = '' OR agent_id = $7) AND ($8 = '' OR subject = $8 OR subject = ANY($12::text[]))
		  AND ($9::timestamptz IS NULL OR at >= $9) AND ($10::timestamptz IS NULL OR at < $10)
		ORDER BY `+order+` LIMIT $11`,
		org, f.AfterID, f.Action, f.EntityType, f.EntityID, f.ActorKeyID, f.AgentID, f.Subject, f.Since, f.Until, f.Limit, f.Subjects)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Record, error) {
		var rec Record
		err := r.Scan(&rec.ID, &rec.Seq, &rec.At, &rec.ActorKeyID, &rec.ActorRole, &rec.AgentID, &rec.Action, &rec.EntityType,
			&rec.EntityID, &rec.RequestID, &rec.Subject, &rec.Status, &rec.Details, &rec.Hash, &rec.PrevHash)
		return rec, err
	})
	return recs, pg.Interpret(err)
}

// insertManySQL is insertSQL for many records in one statement (ids in input order).
const insertManySQL = `INSERT INTO audit_log (org_id, actor_key_id, actor_role, agent_id, action, entity_type,
			entity_id, request_id, subject, status, details)
		SELECT $1, a.actor, a.role, nullif(a.agent, ''), a.action, a.etype, nullif(a.eid, ''), nullif(a.rid, ''),
			nullif(a.subj, ''), nullif(a.status, 0), a.details
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
			$10::int[], $11::jsonb[]) WITH ORDINALITY AS a(actor, role, agent, action, etype, eid, rid, subj, status, details, ord)
		ORDER BY a.ord`

// InsertMany is Insert for records of one org (a group commit's), as one statement: for
// one record, Insert's (plain parameters bind with far fewer allocations than ten
// one-element arrays); for more, one row per element of ten arrays, whose nine text
// columns share one backing array.
func InsertMany(org string, es []Entry) (string, []any, error) {
	for _, e := range es {
		if e.OrgID != org {
			return "", nil, fmt.Errorf("audit: record of org %q in a batch of org %q", e.OrgID, org)
		}
	}
	if len(es) == 1 {
		return Insert(es[0])
	}
	n := len(es)
	text := make([]string, 9*n)
	col := func(i int) []string { return text[i*n : (i+1)*n : (i+1)*n] }
	actor, role, agent, action := col(0), col(1), col(2), col(3)
	etype, eid, rid, subj, details := col(4), col(5), col(6), col(7), col(8)
	status := make([]int32, n)
	for i, e := range es {
		b, err := e.details()
		if err != nil {
			return "", nil, err
		}
		actor[i], role[i], agent[i], action[i] = e.ActorKeyID, e.ActorRole, e.AgentID, e.Action
		etype[i], eid[i], rid[i], subj[i] = e.EntityType, e.EntityID, e.RequestID, e.Subject
		status[i], details[i] = int32(e.Status), string(b)
	}
	return insertManySQL, []any{org, actor, role, agent, action, etype, eid, rid, subj, status, details}, nil
}

// plainDetails encodes d as encoding/json would when it has at most four entries whose
// keys and values are strings that JSON needs no escape for (the request records' details:
// {"method", "route"} and "via" for in-process callers), in one allocation; ok is false
// otherwise.
func plainDetails(d map[string]any) (b []byte, ok bool) {
	if len(d) > 4 {
		return nil, false
	}
	var keys [4]string
	var vals [4]string
	n, size := 0, 2
	for k, v := range d {
		sv, ok := v.(string)
		if !ok || !plainJSON(k) || !plainJSON(sv) {
			return nil, false
		}
		// Insertion sort: encoding/json writes a map's keys in order.
		i := n
		for ; i > 0 && keys[i-1] > k; i-- {
			keys[i], vals[i] = keys[i-1], vals[i-1]
		}
		keys[i], vals[i] = k, sv
		n++
		size += len(k) + len(sv) + 6 // "k":"v",
	}
	b = make([]byte, 0, size)
	b = append(b, '{')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, keys[i]...)
		b = append(b, `":"`...)
		b = append(b, vals[i]...)
		b = append(b, '"')
	}
	return append(b, '}'), true
}

// plainJSON: s is printable ASCII without the characters encoding/json escapes (" \ < > &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// details is the record's details as JSON ({} when none).
func (e Entry) details() ([]byte, error) {
	if b, ok := plainDetails(e.Details); ok {
		return b, nil
	}
	d := e.Details
	if d == nil {
		d = map[string]any{}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding audit details: %w", err)
	}
	return b, nil
}
