package episodic

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Limits on events.
const (
	// MaxOpLen is the longest op, in characters.
	MaxOpLen = 200
	// MaxBatch is the most events one Append takes.
	MaxBatch = 1000
	// MaxKeyLen is the longest per-event idempotency key.
	MaxKeyLen = 255
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
	// MaxForkDepth is how many forks deep a job's ancestry may go.
	MaxForkDepth = 32
	// OpRevert is the op of compensating events; clients cannot append it directly.
	OpRevert = "revert"
)

// EventInput is one event to append.
type EventInput struct {
	Op             string          `json:"op" minLength:"1" maxLength:"200" doc:"What was done, e.g. \"video.crop\". 1-200 characters, no control characters; \"revert\" is reserved."`
	Params         json.RawMessage `json:"params,omitempty" doc:"The op's parameters (a JSON object; absent or null means {}). Part of the fingerprint."`
	Result         json.RawMessage `json:"result,omitempty" doc:"What the op produced (any JSON). Not part of the fingerprint."`
	AgentID        string          `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The agent that did it."`
	UserID         string          `json:"user_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject (end user) id."`
	SessionID      string          `json:"session_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Session id."`
	IdempotencyKey string          `json:"idempotency_key,omitempty" maxLength:"255" doc:"Optional per-event key: appending an event with a key the job already has returns the original event instead of a new one (its op and params must match)."`
}

// Event is one stored event.
type Event struct {
	JobID          string          `json:"job_id" doc:"The job whose log holds the event (a fork's view shows its parent's events with the parent's job_id)."`
	Seq            int64           `json:"seq" doc:"Position in the job's log: 1, 2, 3, ... with no gaps."`
	Op             string          `json:"op"`
	Params         json.RawMessage `json:"params"`
	Result         json.RawMessage `json:"result,omitempty"`
	Fingerprint    string          `json:"fingerprint" doc:"Hex SHA-256 of the op and the canonical JSON of params (docs/episodic.md)."`
	AgentID        string          `json:"agent_id,omitempty"`
	UserID         string          `json:"user_id,omitempty"`
	SessionID      string          `json:"session_id,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	RevertsSeq     int64           `json:"reverts_seq,omitempty" doc:"For a revert event: the seq it reverts."`
	CreatedAt      time.Time       `json:"created_at"`
	Replayed       bool            `json:"replayed,omitempty" doc:"True when this append returned an existing event for the same idempotency key."`
}

// Head is a job's log head.
type Head struct {
	JobID       string    `json:"job_id"`
	LastSeq     int64     `json:"last_seq"`
	ParentJobID string    `json:"parent_job_id,omitempty"`
	ParentSeq   int64     `json:"parent_seq,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// ListQuery selects a page of a job's events, in seq order.
type ListQuery struct {
	AfterSeq   int64     // only seq > AfterSeq
	Cursor     string    // a next_cursor (a seq, as text); when set it replaces AfterSeq
	ThroughSeq int64     // only seq <= ThroughSeq (0: no bound)
	Limit      int       // 1..MaxListLimit+1 (0: 100)
	Op         string    // only this op ("": all)
	Since      time.Time // only created_at >= Since (zero: no bound)
	Until      time.Time // only created_at < Until (zero: no bound)
	// HideCompacted drops the job's own events that consolidation compacted (their summary
	// event stands in for them): the default read view of GET /v1/jobs/{job}/events.
	HideCompacted bool
}

// RevertInput describes who reverts and why.
type RevertInput struct {
	AgentID   string
	UserID    string
	SessionID string
	Reason    string
}

// Options configures a Store.
type Options struct {
	// MaxJSONDepth bounds the nesting of params, result and metadata (0: DefaultMaxDepth).
	MaxJSONDepth int
}

// Store is the episodic log and the asset registry. It holds no connection: every method
// takes the pg.DBTX to run on (in a request, the request's transaction).
type Store struct {
	maxDepth int
}

// NewStore returns a Store.
func NewStore(o Options) *Store {
	if o.MaxJSONDepth <= 0 {
		o.MaxJSONDepth = DefaultMaxDepth
	}
	return &Store{maxDepth: o.MaxJSONDepth}
}

// fieldErr is a 422 for field of the i-th event ("[3].op"); callers prefix the location.
func fieldErr(i int, field, format string, args ...any) error {
	return strata.Invalid(fmt.Sprintf("[%d].%s", i, field), format, args...)
}

// prepared is a validated event ready to insert.
type prepared struct {
	op, agent, user, session, key string
	params, result                []byte
	fp                            []byte
	reverts                       int64
}

// CheckOp validates an op: 1-MaxOpLen characters of valid UTF-8 without control characters.
func CheckOp(op string) string {
	switch {
	case op == "":
		return "is required"
	case !utf8.ValidString(op):
		return "must be valid UTF-8"
	case utf8.RuneCountInString(op) > MaxOpLen:
		return fmt.Sprintf("must be at most %d characters", MaxOpLen)
	case strings.ContainsFunc(op, func(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }):
		return "must not contain control characters (NUL, newline, ...)"
	}
	return ""
}

func validKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkJSON canonicalises raw (validating it) and returns the canonical form.
func (s *Store) checkJSON(raw []byte) ([]byte, string) {
	c, err := Canonicalize(raw, s.maxDepth)
	if err != nil {
		var je *JSONError
		if errors.As(err, &je) {
			return nil, je.Msg
		}
		return nil, err.Error()
	}
	return c, ""
}

func (s *Store) prepare(i int, in EventInput) (prepared, error) {
	p := prepared{op: in.Op, agent: in.AgentID, user: in.UserID, session: in.SessionID, key: in.IdempotencyKey}
	if msg := CheckOp(in.Op); msg != "" {
		return p, fieldErr(i, "op", "%s", msg)
	}
	if in.Op == OpRevert {
		return p, fieldErr(i, "op", `"revert" is reserved: use POST /v1/jobs/{job}/events/{seq}/revert`)
	}
	for _, f := range []struct{ name, v string }{{"agent_id", in.AgentID}, {"user_id", in.UserID}, {"session_id", in.SessionID}} {
		if f.v != "" && !strata.ValidID(f.v) {
			return p, fieldErr(i, f.name, "must be 1-%d characters of A-Z a-z 0-9 . _ : -", strata.MaxIDLen)
		}
	}
	if in.IdempotencyKey != "" && !validKey(in.IdempotencyKey) {
		return p, fieldErr(i, "idempotency_key", "must be 1-%d visible ASCII characters", MaxKeyLen)
	}
	params := bytes.TrimSpace(in.Params)
	if isNullOrAbsent(params) {
		params = []byte("{}")
	}
	if params[0] != '{' {
		return p, fieldErr(i, "params", "must be a JSON object")
	}
	cp, msg := s.checkJSON(params)
	if msg != "" {
		return p, fieldErr(i, "params", "%s", msg)
	}
	p.params = params
	p.fp = fingerprintCanonical(in.Op, cp)
	if r := bytes.TrimSpace(in.Result); !isNullOrAbsent(r) {
		if _, msg := s.checkJSON(r); msg != "" {
			return p, fieldErr(i, "result", "%s", msg)
		}
		p.result = r
	}
	return p, nil
}

// Validate checks a batch without touching the database; the errors are what Append would
// return (a *strata.FieldError whose Field is "[i].name").
func (s *Store) Validate(in []EventInput) error {
	_, err := s.prepareAll(in)
	return err
}

func (s *Store) prepareAll(in []EventInput) ([]prepared, error) {
	switch {
	case len(in) == 0:
		return nil, strata.Invalid("", "at least one event is required")
	case len(in) > MaxBatch:
		return nil, strata.Invalid("", "at most %d events per append", MaxBatch)
	}
	out := make([]prepared, len(in))
	for i, e := range in {
		p, err := s.prepare(i, e)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// eventCols are scanEvent's columns. The fingerprint comes as hex text (what Event holds):
// one string instead of the bytes, their copy and their encoding.
const eventCols = `e.job_id, e.seq, e.op, e.params, e.result, coalesce(encode(e.fingerprint, 'hex'), ''), coalesce(e.agent_id, ''),
	coalesce(e.user_id, ''), coalesce(e.session_id, ''), coalesce(e.idempotency_key, ''),
	coalesce(e.reverts_seq, 0), e.created_at`

func scanEvent(row pgx.Row) (Event, error) {
	var r eventRow
	return r.scan(row)
}

// eventRow is what an event is scanned into: the destinations escape to the driver, so
// keeping them together costs one allocation (per query, in collectEvents) instead of
// one per destination per row.
type eventRow struct {
	e              Event
	params, result []byte
}

func (r *eventRow) scan(row pgx.Row) (Event, error) {
	r.e, r.params, r.result = Event{}, nil, nil // fresh buffers: the last event keeps its own
	e := &r.e
	err := row.Scan(&e.JobID, &e.Seq, &e.Op, &r.params, &r.result, &e.Fingerprint, &e.AgentID, &e.UserID, &e.SessionID,
		&e.IdempotencyKey, &e.RevertsSeq, &e.CreatedAt)
	if err != nil {
		return *e, err
	}
	e.Params = json.RawMessage(r.params)
	if r.result != nil {
		e.Result = json.RawMessage(r.result)
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return *e, nil
}

func collectEvents(rows pgx.Rows, err error) ([]Event, error) {
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	var out []Event
	var r eventRow
	for rows.Next() {
		e, err := r.scan(rows)
		if err != nil {
			return nil, pg.Interpret(err)
		}
		out = append(out, e)
	}
	return out, pg.Interpret(rows.Err())
}

// insertSQL bumps the job's counter (creating the job on first append), which locks the
// counter row until the transaction ends, and inserts the events with the seqs it freed:
// one round trip, O(1) in the size of the log.
const insertSQL = `WITH head AS (
	INSERT INTO episodic_jobs AS j (org_id, job_id, last_seq) VALUES ($1, $2, $3)
	ON CONFLICT (org_id, job_id) DO UPDATE SET last_seq = j.last_seq + excluded.last_seq
	RETURNING j.last_seq)
INSERT INTO episodic_events (org_id, job_id, seq, op, params, result, fingerprint, agent_id, user_id,
	session_id, idempotency_key, reverts_seq)
SELECT $1, $2, head.last_seq - $3 + u.ord, u.op, u.params::jsonb, u.result::jsonb, u.fp, nullif(u.agent, ''),
	nullif(u.usr, ''), nullif(u.sess, ''), nullif(u.ikey, ''), u.rev
FROM head, unnest($4::text[], $5::text[], $6::text[], $7::bytea[], $8::text[], $9::text[], $10::text[],
	$11::text[], $12::bigint[]) WITH ORDINALITY AS u(op, params, result, fp, agent, usr, sess, ikey, rev, ord)
RETURNING seq, created_at`

// insert appends ps to the job and returns them as stored, in order.
func insert(ctx context.Context, db pg.DBTX, org, job string, ps []prepared) ([]Event, error) {
	n := len(ps)
	if n == 1 {
		return insertOne(ctx, db, org, job, ps[0])
	}
	ops, params, fps := make([]string, n), make([]string, n), make([][]byte, n)
	results := make([]*string, n)
	agents, users, sessions, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	revs := make([]*int64, n)
	for i, p := range ps {
		ops[i], params[i], fps[i] = p.op, string(p.params), p.fp
		if p.result != nil {
			r := string(p.result)
			results[i] = &r
		}
		agents[i], users[i], sessions[i], keys[i] = p.agent, p.user, p.session, p.key
		if p.reverts > 0 {
			r := p.reverts
			revs[i] = &r
		}
	}
	rows, err := db.Query(ctx, insertSQL, org, job, n, ops, params, results, fps, agents, users, sessions, keys, revs)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	type stored struct {
		seq int64
		at  time.Time
	}
	var got []stored
	for rows.Next() {
		var st stored
		if err := rows.Scan(&st.seq, &st.at); err != nil {
			return nil, pg.Interpret(err)
		}
		got = append(got, st)
	}
	if err := rows.Err(); err != nil {
		return nil, pg.Interpret(err)
	}
	if len(got) != n {
		return nil, fmt.Errorf("episodic: inserted %d of %d events", len(got), n)
	}
	slices.SortFunc(got, func(a, b stored) int { return int(a.seq - b.seq) })
	out := make([]Event, n)
	for i, p := range ps {
		out[i] = Event{JobID: job, Seq: got[i].seq, Op: p.op, Params: json.RawMessage(p.params),
			Fingerprint: hex.EncodeToString(p.fp), AgentID: p.agent, UserID: p.user, SessionID: p.session,
			IdempotencyKey: p.key, RevertsSeq: p.reverts, CreatedAt: got[i].at.UTC()}
		if p.result != nil {
			out[i].Result = json.RawMessage(p.result)
		}
	}
	return out, nil
}

// Append appends events to job in one go, creating the job's log on first use, and returns
// them as stored, in input order. seqs are consecutive, strictly increasing and gap-free
// per job, also under concurrent appenders (they serialise on the job's counter row until
// their transactions end). An event whose idempotency key the job already has (in its
// view, including a fork's parent events) is not appended again: the original comes back
// with Replayed set; reusing a key for another op or params is a 422. db must be a
// transaction. Bad input is a *strata.FieldError naming "[i].field".
func (s *Store) Append(ctx context.Context, db pg.DBTX, org, job string, in []EventInput) ([]Event, error) {
	if err := strata.CheckID("job", job, false); err != nil {
		return nil, err
	}
	ps, err := s.prepareAll(in)
	if err != nil {
		return nil, err
	}
	hasKeys := false
	for _, p := range ps {
		if p.key != "" {
			hasKeys = true
			break
		}
	}
	if !hasKeys {
		return insert(ctx, db, org, job, ps)
	}

	// Lock the counter row first (creating it), so no concurrent append with the same keys
	// can slip in between the lookup and the insert.
	if _, err := db.Exec(ctx, `INSERT INTO episodic_jobs AS j (org_id, job_id) VALUES ($1, $2)
		ON CONFLICT (org_id, job_id) DO UPDATE SET last_seq = j.last_seq`, org, job); err != nil {
		return nil, pg.Interpret(err)
	}
	segs, _, err := s.view(ctx, db, org, job)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(ps))
	for _, p := range ps {
		if p.key != "" {
			keys = append(keys, p.key)
		}
	}
	js, los, his := segArrays(segs)
	existing, err := collectEvents(db.Query(ctx, `SELECT `+eventCols+`
		FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS v(job_id, lo, hi)
		JOIN episodic_events e ON e.org_id = $1 AND e.job_id = v.job_id AND e.seq > v.lo AND e.seq <= v.hi
		WHERE e.idempotency_key = ANY($5::text[])`, org, js, los, his, keys))
	if err != nil {
		return nil, err
	}
	byKey := map[string]Event{}
	for _, e := range existing {
		e.Replayed = true
		byKey[e.IdempotencyKey] = e
	}
	out := make([]Event, len(ps))
	batchKey := map[string]int{} // key → index of the first new event with it
	var fresh []prepared
	var freshIdx []int
	for i, p := range ps {
		if p.key == "" {
			fresh, freshIdx = append(fresh, p), append(freshIdx, i)
			continue
		}
		if e, ok := byKey[p.key]; ok {
			if e.Op != p.op || e.Fingerprint != hex.EncodeToString(p.fp) {
				return nil, fieldErr(i, "idempotency_key", "was already used for a different event (seq %d, op %q) in this job", e.Seq, e.Op)
			}
			out[i] = e
			continue
		}
		if j, ok := batchKey[p.key]; ok {
			if ps[j].op != p.op || !bytes.Equal(ps[j].fp, p.fp) {
				return nil, fieldErr(i, "idempotency_key", "is used by event %d of this batch for a different event", j)
			}
			out[i] = Event{Seq: -1 - int64(j)} // filled in below
			continue
		}
		batchKey[p.key] = i
		fresh, freshIdx = append(fresh, p), append(freshIdx, i)
	}
	if len(fresh) > 0 {
		stored, err := insert(ctx, db, org, job, fresh)
		if err != nil {
			return nil, err
		}
		for k, i := range freshIdx {
			out[i] = stored[k]
		}
	}
	for i := range out {
		if out[i].Seq < 0 {
			out[i] = out[-1-out[i].Seq]
			out[i].Replayed = true
		}
	}
	return out, nil
}

// segment is a slice of a job's view: the events of job with lo < seq <= hi.
type segment struct {
	job    string
	lo, hi int64
}

func segArrays(segs []segment) ([]string, []int64, []int64) {
	js, los, his := make([]string, len(segs)), make([]int64, len(segs)), make([]int64, len(segs))
	for i, s := range segs {
		js[i], los[i], his[i] = s.job, s.lo, s.hi
	}
	return js, los, his
}

// view resolves the job's ancestry into segments, root first: a fork F of P at 10, P a fork
// of G at 5 is G (0,5], P (5,10], F (10,∞). ErrNotFound when the job has no log. Each step
// reads the parent by key in a lateral subquery: as a join, the generic plan a connection
// built while episodic_jobs held a few rows read every job of the org at each step.
func (s *Store) view(ctx context.Context, db pg.DBTX, org, job string) ([]segment, Head, error) {
	rows, err := db.Query(ctx, `WITH RECURSIVE chain AS (
			SELECT job_id, last_seq, parent_job_id, parent_seq, created_at, 1 AS depth
			FROM episodic_jobs WHERE org_id = $1 AND job_id = $2
		UNION ALL
			SELECT j.job_id, j.last_seq, j.parent_job_id, j.parent_seq, j.created_at, c.depth + 1
			FROM chain c CROSS JOIN LATERAL (SELECT job_id, last_seq, parent_job_id, parent_seq, created_at
				FROM episodic_jobs WHERE org_id = $1 AND job_id = c.parent_job_id OFFSET 0) j
			WHERE c.depth <= $3)
		SELECT job_id, last_seq, coalesce(parent_job_id, ''), coalesce(parent_seq, 0), created_at FROM chain ORDER BY depth`,
		org, job, MaxForkDepth)
	if err != nil {
		return nil, Head{}, pg.Interpret(err)
	}
	heads, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Head, error) {
		var h Head
		err := r.Scan(&h.JobID, &h.LastSeq, &h.ParentJobID, &h.ParentSeq, &h.CreatedAt)
		h.CreatedAt = h.CreatedAt.UTC()
		return h, err
	})
	if err != nil {
		return nil, Head{}, pg.Interpret(err)
	}
	if len(heads) == 0 {
		return nil, Head{}, strata.ErrNotFound
	}
	segs := make([]segment, len(heads))
	for i, h := range heads {
		hi := int64(math.MaxInt64)
		if i > 0 {
			hi = heads[i-1].ParentSeq
		}
		segs[len(heads)-1-i] = segment{job: h.JobID, lo: h.ParentSeq, hi: hi}
	}
	return segs, heads[0], nil
}

// HeadSeqSQL is an SQL expression for the last seq of job's log (NULL when it has none),
// with org and job the statement's own parameter references (such as "$1"): a write
// elsewhere that records the log's head evaluates it in its own statement.
func HeadSeqSQL(org, job string) string {
	return `(SELECT last_seq FROM episodic_jobs WHERE org_id = ` + org + ` AND job_id = ` + job + `)`
}

// Head returns the job's log head (last seq, fork origin). ErrNotFound when the job has no
// log yet.
func (s *Store) Head(ctx context.Context, db pg.DBTX, org, job string) (Head, error) {
	var h Head
	err := db.QueryRow(ctx, `SELECT job_id, last_seq, coalesce(parent_job_id, ''), coalesce(parent_seq, 0), created_at
		FROM episodic_jobs WHERE org_id = $1 AND job_id = $2`, org, job).
		Scan(&h.JobID, &h.LastSeq, &h.ParentJobID, &h.ParentSeq, &h.CreatedAt)
	h.CreatedAt = h.CreatedAt.UTC()
	return h, pg.Interpret(err)
}

// EnsureJobSQL is EnsureJob as a statement another statement may carry as a CTE: it creates
// the job's log (org and job are SQL expressions) for each row of from (a table expression:
// another CTE's name).
func EnsureJobSQL(org, job, from string) string {
	return `INSERT INTO episodic_jobs (org_id, job_id) SELECT ` + org + `, ` + job + ` FROM ` + from + ` ON CONFLICT DO NOTHING`
}

// EnsureJob creates the job's (empty) log if it does not exist, so reads answer an empty
// list instead of ErrNotFound. The jobs tier calls it when it creates a job.
func (s *Store) EnsureJob(ctx context.Context, db pg.DBTX, org, job string) error {
	_, err := db.Exec(ctx, `INSERT INTO episodic_jobs (org_id, job_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, org, job)
	return pg.Interpret(err)
}

// Fork creates child as a fork of parent at atSeq: child's view is parent's view up to
// atSeq (inclusive) followed by child's own events, whose seqs continue at atSeq+1. Nothing
// is copied. Forking again with the same parent and seq returns the existing fork; a child
// that exists otherwise is a conflict. atSeq beyond the parent's last seq is a 422.
func (s *Store) Fork(ctx context.Context, db pg.DBTX, org, parent, child string, atSeq int64) (Head, error) {
	if err := strata.CheckID("job", child, false); err != nil {
		return Head{}, err
	}
	segs, ph, err := s.view(ctx, db, org, parent)
	if err != nil {
		return Head{}, err
	}
	if atSeq < 0 || atSeq > ph.LastSeq {
		return Head{}, strata.Invalid("seq", "must be between 0 and the parent's last seq (%d)", ph.LastSeq)
	}
	if len(segs) >= MaxForkDepth {
		return Head{}, strata.Invalid("job", "forks may nest at most %d deep", MaxForkDepth)
	}
	if parent == child {
		return Head{}, strata.Invalid("job", "a job cannot fork itself")
	}
	var h Head
	err = db.QueryRow(ctx, `INSERT INTO episodic_jobs (org_id, job_id, last_seq, parent_job_id, parent_seq)
		VALUES ($1, $2, $4, $3, $4) ON CONFLICT DO NOTHING
		RETURNING job_id, last_seq, parent_job_id, parent_seq, created_at`, org, child, parent, atSeq).
		Scan(&h.JobID, &h.LastSeq, &h.ParentJobID, &h.ParentSeq, &h.CreatedAt)
	if err == nil {
		h.CreatedAt = h.CreatedAt.UTC()
		return h, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Head{}, pg.Interpret(err)
	}
	existing, err := s.Head(ctx, db, org, child)
	if err != nil {
		return Head{}, err
	}
	if existing.ParentJobID == parent && existing.ParentSeq == atSeq {
		return existing, nil
	}
	return Head{}, strata.Conflict("a job with this id already exists", map[string]any{
		"job_id": child, "parent_job_id": existing.ParentJobID, "parent_seq": existing.ParentSeq, "last_seq": existing.LastSeq})
}

// List returns up to q.Limit events of the job's view in seq order (a fork's parent events
// first). ErrNotFound when the job has no log. A bad cursor, op or time range is a
// FieldError for "cursor", "op" or "until".
func (s *Store) List(ctx context.Context, db pg.DBTX, org, job string, q ListQuery) ([]Event, error) {
	if q.Cursor != "" {
		c, err := strconv.ParseInt(q.Cursor, 10, 64)
		if err != nil || c < 0 {
			return nil, strata.Invalid("cursor", "must be a next_cursor this API returned")
		}
		q.AfterSeq = c
	}
	if msg := CheckOp(q.Op); q.Op != "" && msg != "" {
		return nil, strata.Invalid("op", "%s", msg)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return nil, strata.Invalid("until", "must be after since")
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.Limit > MaxListLimit+1 {
		q.Limit = MaxListLimit + 1
	}
	segs, _, err := s.view(ctx, db, org, job)
	if err != nil {
		return nil, err
	}
	var since, until *time.Time
	if !q.Since.IsZero() {
		since = &q.Since
	}
	if !q.Until.IsZero() {
		until = &q.Until
	}
	var out []Event
	for _, sg := range segs {
		lo, hi := max(sg.lo, q.AfterSeq), sg.hi
		if q.ThroughSeq > 0 {
			hi = min(hi, q.ThroughSeq)
		}
		if lo >= hi {
			continue
		}
		evs, err := collectEvents(db.Query(ctx, `SELECT `+eventCols+` FROM episodic_events e
			WHERE e.org_id = $1 AND e.job_id = $2 AND e.seq > $3 AND e.seq <= $4
			  AND ($5 = '' OR e.op = $5)
			  AND ($6::timestamptz IS NULL OR e.created_at >= $6)
			  AND ($7::timestamptz IS NULL OR e.created_at < $7)
			  AND NOT ($9 AND EXISTS (SELECT 1 FROM episodic_compactions c WHERE c.org_id = e.org_id
			           AND c.job_id = e.job_id AND e.seq BETWEEN c.from_seq AND c.to_seq))
			ORDER BY e.seq LIMIT $8`, org, sg.job, lo, hi, q.Op, since, until, q.Limit-len(out), q.HideCompacted && sg.job == job))
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
		if len(out) >= q.Limit {
			break
		}
	}
	return out, nil
}

// Last returns the job's last n events (of its view), oldest first: what resume shows.
// ErrNotFound when the job has no log.
func (s *Store) Last(ctx context.Context, db pg.DBTX, org, job string, n int) ([]Event, error) {
	segs, _, err := s.view(ctx, db, org, job)
	if err != nil {
		return nil, err
	}
	var out []Event
	for i := len(segs) - 1; i >= 0 && len(out) < n; i-- {
		sg := segs[i]
		evs, err := collectEvents(db.Query(ctx, `SELECT `+eventCols+` FROM episodic_events e
			WHERE e.org_id = $1 AND e.job_id = $2 AND e.seq > $3 AND e.seq <= $4
			ORDER BY e.seq DESC LIMIT $5`, org, sg.job, sg.lo, sg.hi, n-len(out)))
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	slices.Reverse(out)
	return out, nil
}

// Get returns the event at seq in the job's view. ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, db pg.DBTX, org, job string, seq int64) (Event, error) {
	segs, _, err := s.view(ctx, db, org, job)
	if err != nil {
		return Event{}, err
	}
	return s.getIn(ctx, db, org, segs, seq)
}

func (s *Store) getIn(ctx context.Context, db pg.DBTX, org string, segs []segment, seq int64) (Event, error) {
	for _, sg := range segs {
		if seq > sg.lo && seq <= sg.hi {
			e, err := scanEvent(db.QueryRow(ctx, `SELECT `+eventCols+` FROM episodic_events e
				WHERE e.org_id = $1 AND e.job_id = $2 AND e.seq = $3`, org, sg.job, seq))
			return e, pg.Interpret(err)
		}
	}
	return Event{}, strata.ErrNotFound
}

// ParseFingerprint decodes a hex fingerprint.
func ParseFingerprint(s string) ([]byte, bool) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return nil, false
	}
	return b, true
}

// Applied reports whether the job's view holds an event with this fingerprint that has not
// been reverted, and returns the latest such event. A job without a log has applied nothing
// (false, no error).
func (s *Store) Applied(ctx context.Context, db pg.DBTX, org, job string, fp []byte) (*Event, error) {
	e, err := scanEvent(db.QueryRow(ctx, appliedSQL, org, job, MaxForkDepth, fp))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, pg.Interpret(err)
	}
	return &e, nil
}

// appliedSQL is Applied in one statement: the view's segments (viewWalkSQL), then in each
// segment the newest event of fingerprint $4 that is not a revert and that no revert in the
// view undoes, read by (org, job, fingerprint) in a lateral subquery; the newest of those. A
// job without a log has no segments: no row. It was two statements, the view and then a
// join of its segments (as arrays) to the events, whose generic plan looked the fingerprint
// up over the org's whole index range (TestAppliedReadsTheJobsIndexRange).
const appliedSQL = viewWalkSQL + `
	SELECT ` + eventCols + ` FROM chain v CROSS JOIN LATERAL (
		SELECT * FROM episodic_events e
		WHERE e.org_id = $1 AND e.job_id = v.job_id AND e.fingerprint = $4 AND e.seq > v.lo AND e.seq <= v.hi
		  AND e.reverts_seq IS NULL
		  AND NOT EXISTS (SELECT 1 FROM chain w CROSS JOIN LATERAL (SELECT 1 FROM episodic_events r
			WHERE r.org_id = $1 AND r.job_id = w.job_id AND r.reverts_seq = e.seq AND r.seq > w.lo AND r.seq <= w.hi
			OFFSET 0) r)
		ORDER BY e.seq DESC LIMIT 1) e
	ORDER BY e.seq DESC LIMIT 1`

// AppliedQuery asks whether an edit was applied: by the fingerprint an append returned, or
// by op and params (a JSON object as text; "" or null: {}).
type AppliedQuery struct {
	Fingerprint string
	Op          string
	Params      string
}

// AppliedEdit is Applied for a client's question, and answers the fingerprint asked about.
// A question that gives both or neither, a fingerprint that is not 64 hex digits and params
// that are not a JSON object are FieldErrors for "fingerprint", "op" and "params".
func (s *Store) AppliedEdit(ctx context.Context, db pg.DBTX, org, job string, q AppliedQuery) (*Event, string, error) {
	switch {
	case q.Fingerprint != "" && (q.Op != "" || q.Params != ""):
		return nil, "", strata.Invalid("fingerprint", "give either fingerprint or op (with params), not both")
	case q.Fingerprint != "":
		b, ok := ParseFingerprint(q.Fingerprint)
		if !ok {
			return nil, "", strata.Invalid("fingerprint", "must be 64 lowercase hex digits")
		}
		ev, err := s.Applied(ctx, db, org, job, b)
		return ev, q.Fingerprint, err
	case q.Op != "":
		params := []byte(q.Params)
		if p := bytes.TrimSpace(params); len(p) > 0 && string(p) != "null" && p[0] != '{' {
			return nil, "", strata.Invalid("params", "must be a JSON object")
		}
		return s.AppliedOp(ctx, db, org, job, q.Op, params)
	}
	return nil, "", strata.Invalid("op", "op (with params) or fingerprint is required")
}

// AppliedOp is Applied for an op and its params (fingerprinted here). Bad params are a
// *strata.FieldError for "params".
func (s *Store) AppliedOp(ctx context.Context, db pg.DBTX, org, job, op string, params []byte) (*Event, string, error) {
	if msg := CheckOp(op); msg != "" {
		return nil, "", strata.Invalid("op", "%s", msg)
	}
	fp, err := fingerprint(op, params, s.maxDepth)
	if err != nil {
		var je *JSONError
		if errors.As(err, &je) {
			return nil, "", strata.Invalid("params", "%s", je.Msg)
		}
		return nil, "", err
	}
	e, err := s.Applied(ctx, db, org, job, fp)
	return e, hex.EncodeToString(fp), err
}

// Revert appends a compensating revert event for the event at seq, so that its edit no
// longer counts as applied; the original stays in the log. Reverting an event that is
// already reverted (in this job's view) returns the existing revert event with created
// false. ErrNotFound when the job or the event does not exist; reverting a revert is a 422
// (re-apply by appending the op again). db must be a transaction.
func (s *Store) Revert(ctx context.Context, db pg.DBTX, org, job string, seq int64, in RevertInput) (Event, bool, error) {
	for _, f := range []struct{ name, v string }{{"agent_id", in.AgentID}, {"user_id", in.UserID}, {"session_id", in.SessionID}} {
		if f.v != "" && !strata.ValidID(f.v) {
			return Event{}, false, strata.Invalid(f.name, "must be 1-%d characters of A-Z a-z 0-9 . _ : -", strata.MaxIDLen)
		}
	}
	if err := strata.CheckText("reason", in.Reason); err != nil {
		return Event{}, false, err
	}
	if len(in.Reason) > 2000 {
		return Event{}, false, strata.Invalid("reason", "must be at most 2000 bytes")
	}
	if !utf8.ValidString(in.Reason) {
		return Event{}, false, strata.Invalid("reason", "must be valid UTF-8")
	}
	// Lock the counter row: reverts of one job serialise with its appends.
	var last int64
	if err := db.QueryRow(ctx, `SELECT last_seq FROM episodic_jobs WHERE org_id = $1 AND job_id = $2 FOR UPDATE`,
		org, job).Scan(&last); err != nil {
		return Event{}, false, pg.Interpret(err)
	}
	segs, _, err := s.view(ctx, db, org, job)
	if err != nil {
		return Event{}, false, err
	}
	target, err := s.getIn(ctx, db, org, segs, seq)
	if err != nil {
		return Event{}, false, err
	}
	if target.Op == OpRevert {
		return Event{}, false, strata.Invalid("seq", "event %d is itself a revert; append the op again to re-apply it", seq)
	}
	js, los, his := segArrays(segs)
	existing, err := scanEvent(db.QueryRow(ctx, `SELECT `+eventCols+`
		FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS v(job_id, lo, hi)
		JOIN episodic_events e ON e.org_id = $1 AND e.job_id = v.job_id AND e.seq > v.lo AND e.seq <= v.hi
		WHERE e.reverts_seq = $5 ORDER BY e.seq LIMIT 1`, org, js, los, his, seq))
	if err == nil {
		return existing, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Event{}, false, pg.Interpret(err)
	}
	params := []byte(fmt.Sprintf(`{"seq":%d}`, seq))
	p := prepared{op: OpRevert, params: params, fp: fingerprintCanonical(OpRevert, params),
		agent: in.AgentID, user: in.UserID, session: in.SessionID, reverts: seq}
	if in.Reason != "" {
		r, _ := json.Marshal(map[string]string{"reason": in.Reason})
		p.result = r
	}
	evs, err := insert(ctx, db, org, job, []prepared{p})
	if err != nil {
		return Event{}, false, err
	}
	return evs[0], true, nil
}
