package jobs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// LangGraph threads (docs/jobs.md, "LangGraph threads"): what LangGraph's BaseCheckpointSaver
// needs, stored as part of a job. The thread id is the job id; a put creates the job when it
// does not exist yet (a running job with metadata {"langgraph": true}), so resume, audit,
// retention and erasure see the thread like any other job. Tables: migrations/0010.
//
// A put in the root namespace that adds a new checkpoint id also writes the job's next
// checkpoint version (job_checkpoints), whose state names the LangGraph checkpoint
// ({"langgraph": {checkpoint_id, parent_checkpoint_id, source, step}}), and moves the job's
// checkpoint_version and progress_at: GET /v1/jobs/{job}/resume and .../checkpoints show a
// LangGraph thread's progress step by step. The channel values themselves stay in
// langgraph_blobs, written once per (channel, version).

// LangGraphTasksChannel is LangGraph's TASKS channel: in checkpoints older than format 4,
// pending Sends were stored as writes to it on the parent checkpoint.
const LangGraphTasksChannel = "__pregel_tasks"

// LangGraphBlob is one channel's value at one version, as LangGraph's serializer produced it.
type LangGraphBlob struct {
	Channel string `json:"channel" minLength:"1" maxLength:"1000" doc:"Channel name."`
	Version string `json:"version" minLength:"1" maxLength:"200" doc:"The channel's version (LangGraph's channel_versions value, as a string)."`
	Type    string `json:"type" minLength:"1" maxLength:"100" doc:"The serializer's type tag (\"json\", \"bytes\", ...); \"empty\": the channel has this version but no value (data absent)."`
	Data    []byte `json:"data,omitempty" doc:"The serialized value (base64)."`
}

// LangGraphValue is a channel value in a checkpoint tuple.
type LangGraphValue struct {
	Channel string `json:"channel"`
	Type    string `json:"type"`
	Data    []byte `json:"data" doc:"base64"`
}

// LangGraphWrite is one pending write in a putWrites batch.
type LangGraphWrite struct {
	Idx     int    `json:"idx" doc:"Position in the task's batch, or LangGraph's negative index of a special channel (ERROR -1, SCHEDULED -2, INTERRUPT -3, RESUME -4)."`
	Channel string `json:"channel" minLength:"1" maxLength:"1000"`
	Type    string `json:"type" minLength:"1" maxLength:"100"`
	Data    []byte `json:"data,omitempty" doc:"The serialized value (base64)."`
}

// LangGraphPendingWrite is a pending write in a checkpoint tuple.
type LangGraphPendingWrite struct {
	TaskID  string `json:"task_id"`
	Channel string `json:"channel"`
	Type    string `json:"type"`
	Data    []byte `json:"data" doc:"base64"`
}

// LangGraphPut is one put(): a checkpoint document (without channel_values), its metadata,
// and the values of the channels whose version changed.
type LangGraphPut struct {
	CheckpointNS       string
	CheckpointID       string
	ParentCheckpointID string
	Checkpoint         json.RawMessage // a JSON object (id, ts, v, channel_versions, versions_seen, ...)
	Metadata           json.RawMessage // a JSON object; nil: {}
	Blobs              []LangGraphBlob
	UserID             string
	AgentID            string
	SessionID          string
	EventSeq           int64 // the job's episodic head, recorded with the job checkpoint
	// EventSeqSQL, when set, is evaluated instead of EventSeq in the put's own statement: an
	// expression of $1 (org) and $2 (job) that may be NULL (then EventSeq). The composing
	// layer passes the episodic tier's head this way, which saves reading it first.
	EventSeqSQL string
	// OnJobCreatedSQL, when set, is a data-modifying statement (of $1, org, and $2, job) that
	// the put's own statement runs, as a CTE, for each row of its CTE "created" (one row
	// when the put created the job, none otherwise): the composing layer creates the job's
	// log this way. Like EventSeqSQL it is a constant of the caller's (statements are cached
	// by their text).
	OnJobCreatedSQL string
}

// LangGraphPutResult answers a put.
type LangGraphPutResult struct {
	ThreadID     string `json:"thread_id" doc:"The job id."`
	CheckpointNS string `json:"checkpoint_ns"`
	CheckpointID string `json:"checkpoint_id"`
	Created      bool   `json:"created" doc:"false: the checkpoint existed and was overwritten (checkpoint and metadata)."`
	JobVersion   int64  `json:"job_version,omitempty" doc:"The job checkpoint version this checkpoint recorded (root namespace only)."`
	JobCreated   bool   `json:"job_created,omitempty" doc:"This put created the job."`
}

// LangGraphWrites is one putWrites() batch of a task against a checkpoint.
type LangGraphWrites struct {
	CheckpointNS string
	CheckpointID string
	TaskID       string
	TaskPath     string
	Writes       []LangGraphWrite
	UserID       string
	AgentID      string
	SessionID    string
	// OnJobCreatedSQL is LangGraphPut.OnJobCreatedSQL for a putWrites that creates the job.
	OnJobCreatedSQL string
}

// LangGraphTuple is a stored checkpoint with its channel values and pending writes.
type LangGraphTuple struct {
	ThreadID           string                  `json:"thread_id"`
	CheckpointNS       string                  `json:"checkpoint_ns"`
	CheckpointID       string                  `json:"checkpoint_id"`
	ParentCheckpointID string                  `json:"parent_checkpoint_id,omitempty"`
	Checkpoint         json.RawMessage         `json:"checkpoint" doc:"The checkpoint document as put, without channel_values."`
	Metadata           json.RawMessage         `json:"metadata"`
	ChannelValues      []LangGraphValue        `json:"channel_values" doc:"The value of every channel in checkpoint.channel_versions at that version (channels marked empty are left out)."`
	PendingWrites      []LangGraphPendingWrite `json:"pending_writes" doc:"Writes stored against this checkpoint in LangGraph's writesSortKey order: task_path, task_id, idx (strings by code point)."`
	PendingSends       []LangGraphValue        `json:"pending_sends,omitempty" doc:"For a checkpoint older than format 4 with a parent: the parent's writes to __pregel_tasks (the client migrates them into channel_values)."`
	JobVersion         int64                   `json:"job_version,omitempty" doc:"The job checkpoint version this checkpoint recorded (root namespace only)."`
	CreatedAt          time.Time               `json:"created_at"`
}

// langGraphCursor is where a list page ends (its last tuple); the next_cursor is its JSON,
// base64url-encoded.
type langGraphCursor struct {
	CheckpointID string `json:"c"`
	ThreadID     string `json:"t"`
	CheckpointNS string `json:"n"`
}

// Cursor is the next_cursor of a list page that ends with t.
func (t LangGraphTuple) Cursor() string {
	b, _ := json.Marshal(langGraphCursor{CheckpointID: t.CheckpointID, ThreadID: t.ThreadID, CheckpointNS: t.CheckpointNS})
	return base64.RawURLEncoding.EncodeToString(b)
}

// LangGraphListFilter selects checkpoints for list(), newest (greatest checkpoint id) first.
type LangGraphListFilter struct {
	ThreadID     string  // "": every thread of the org
	CheckpointNS *string // nil: every namespace
	CheckpointID string  // "": any
	Before       string  // "": no bound; else checkpoint_id < Before
	Filter       string  // a JSON object the metadata must contain (@>); "": any
	Cursor       string  // the Cursor of the previous page's last tuple; "": from the newest
	Limit        int
}

// Check refuses text Postgres cannot store (NUL characters) in the put's ids. LangGraphPut
// runs it first; a caller that reads another store before LangGraphPut runs it before that
// read, so bad input costs no round trip.
func (in LangGraphPut) Check() error {
	for _, f := range []struct{ name, v string }{{"checkpoint_ns", in.CheckpointNS}, {"checkpoint_id", in.CheckpointID},
		{"parent_checkpoint_id", in.ParentCheckpointID}} {
		if err := strata.CheckText(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

func checkObject(field string, raw json.RawMessage, required bool) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		if required {
			return strata.Invalid(field, "is required (a JSON object)")
		}
		return nil
	}
	if raw[0] != '{' {
		return strata.Invalid(field, "must be a JSON object")
	}
	return strata.CheckJSON(field, raw)
}

// threadCTEs open the single statement of a put or putWrites: created makes the thread's
// job (running, metadata {"langgraph": true}) when it does not exist, locked locks its row
// (FOR NO KEY UPDATE: puts to one thread are serialised, and a concurrent put's
// checkpoint_version is read after it committed) when it exists and is running, and j is
// whichever of the two answered — no row when the job is not running, or when another
// transaction created it after this statement's snapshot (the caller then runs the
// statement once more). The columns of created: $1 org, $2 job, then userArg, agentArg,
// sessionArg, nowArg and versionSQL, the new job's checkpoint_version.
func threadCTEs(userArg, agentArg, sessionArg, nowArg, versionSQL string) string {
	return `created AS (
			INSERT INTO jobs (org_id, job_id, goal, status, owner, user_id, agent_id, session_id, metadata,
				checkpoint_version, progress_at, created_at, updated_at)
			VALUES ($1, $2, '', 'running', '', ` + userArg + `, ` + agentArg + `, ` + sessionArg + `, '{"langgraph": true}',
				` + versionSQL + `, ` + nowArg + `, ` + nowArg + `, ` + nowArg + `)
			ON CONFLICT (org_id, job_id) DO NOTHING
			RETURNING 0::bigint AS checkpoint_version, goal, user_id
		), locked AS (
			SELECT checkpoint_version, goal, user_id FROM jobs
			WHERE org_id = $1 AND job_id = $2 AND status = 'running'
			FOR NO KEY UPDATE
		), j AS (
			SELECT checkpoint_version, goal, coalesce(` + userArg + `::text, user_id) AS subject FROM created
			UNION ALL
			SELECT checkpoint_version, goal, coalesce(` + userArg + `::text, user_id) FROM locked
		)`
}

// threadNotRunning explains why a write to the thread's job was refused (it is finished).
func (s *Store) threadNotRunning(ctx context.Context, db pg.DBTX, org, jobID string) error {
	j, err := s.GetJob(ctx, db, org, jobID)
	if err != nil {
		return err
	}
	return notRunning(j)
}

// LangGraphPut stores a checkpoint of thread jobID (see the type). Putting the same
// (namespace, checkpoint id) again overwrites its checkpoint document and metadata (as
// LangGraph's own savers do) and records no new job checkpoint version. Blobs already
// stored for a (channel, version) are kept. It is one statement (threadCTEs): the job's row
// is locked (created when new), so puts to one thread are serialised.
func (s *Store) LangGraphPut(ctx context.Context, db pg.DBTX, org, jobID string, in LangGraphPut) (LangGraphPutResult, error) {
	sql, args, err := s.langGraphPutSQL(org, jobID, in, putResultSQL)
	if err != nil {
		return LangGraphPutResult{}, err
	}
	res := LangGraphPutResult{ThreadID: jobID, CheckpointNS: in.CheckpointNS, CheckpointID: in.CheckpointID}
	var found int
	var created, inserted *bool
	var recorded *int64
	for attempt := 0; ; attempt++ {
		err = db.QueryRow(ctx, sql, args...).Scan(&found, &created, &inserted, &recorded)
		if err != nil {
			return LangGraphPutResult{}, pg.Interpret(err)
		}
		if found > 0 {
			break
		}
		if attempt > 0 { // the job is not running
			return LangGraphPutResult{}, s.threadNotRunning(ctx, db, org, jobID)
		}
		// Another transaction created the job after this statement's snapshot: once more.
	}
	res.JobCreated = created != nil && *created
	res.Created = inserted != nil && *inserted
	if recorded != nil {
		res.JobVersion = *recorded
	}
	return res, nil
}

// putResultSQL and writesResultSQL end the statements of LangGraphPut and LangGraphPutWrites.
const (
	putResultSQL = `
		SELECT (SELECT count(*) FROM j), EXISTS (SELECT FROM created), (SELECT inserted FROM up), (SELECT job_version FROM up)`
	writesResultSQL = `
		SELECT (SELECT count(*) FROM j), EXISTS (SELECT FROM created), (SELECT count(*) FROM ins)`
)

// expectThreadSQL ends a put's or putWrites' statement that is sent without its result
// being read (LangGraphPutStatement): it fails on the server (40001, strata_expect_rows)
// when the thread's job is not running or was created by another transaction after the
// statement's snapshot, so that nothing of the transaction commits.
const expectThreadSQL = `
		SELECT strata_expect_rows((SELECT count(*) FROM j), 1, 'writing to a running LangGraph thread')`

// LangGraphPutStatement is LangGraphPut as one statement for a caller that sends it without
// reading its result (in the round trip of COMMIT: pg.Session.AtCommit), and so cannot know
// Created, JobVersion or JobCreated. Invalid input is refused here, before anything is sent.
// Where LangGraphPut would answer an error or try once more (the job is not running, or
// appeared after the statement's snapshot), the statement fails on the server and the
// transaction does not commit: the caller then runs LangGraphPut in a new transaction for
// the answer.
func (s *Store) LangGraphPutStatement(org, jobID string, in LangGraphPut) (pg.Statement, error) {
	sql, args, err := s.langGraphPutSQL(org, jobID, in, expectThreadSQL)
	if err != nil {
		return pg.Statement{}, err
	}
	return pg.Statement{SQL: sql, Args: args}, nil
}

// langGraphPutSQL is the put's statement ending in tail, its final SELECT, and its
// arguments: its CTEs are created, locked, j (threadCTEs), bl, up, cp and moved (and, with
// OnJobCreatedSQL, logged).
func (s *Store) langGraphPutSQL(org, jobID string, in LangGraphPut, tail string) (string, []any, error) {
	if err := in.Check(); err != nil {
		return "", nil, err
	}
	if in.CheckpointID == "" {
		return "", nil, strata.Invalid("checkpoint_id", "is required")
	}
	if err := checkObject("checkpoint", in.Checkpoint, true); err != nil {
		return "", nil, err
	}
	if err := checkObject("metadata", in.Metadata, false); err != nil {
		return "", nil, err
	}
	channels := make([]string, len(in.Blobs))
	versions := make([]string, len(in.Blobs))
	types := make([]string, len(in.Blobs))
	data := make([][]byte, len(in.Blobs))
	for i, b := range in.Blobs {
		if b.Type == "empty" && len(b.Data) > 0 {
			return "", nil, strata.Invalid("blobs["+strconv.Itoa(i)+"].data", "must be absent for type empty")
		}
		if b.Type != "empty" && b.Data == nil {
			b.Data = []byte{}
		}
		channels[i], versions[i], types[i], data[i] = b.Channel, b.Version, b.Type, b.Data
	}
	var meta struct {
		Source string          `json:"source"`
		Step   json.RawMessage `json:"step"`
	}
	_ = json.Unmarshal(orEmpty(in.Metadata, "{}"), &meta)
	step := string(bytes.TrimSpace(meta.Step))
	link, err := json.Marshal(map[string]any{"langgraph": map[string]any{"checkpoint_ns": in.CheckpointNS,
		"checkpoint_id": in.CheckpointID, "parent_checkpoint_id": nullable(in.ParentCheckpointID),
		"source": meta.Source, "step": json.RawMessage(orEmpty(meta.Step, "null"))}})
	if err != nil {
		return "", nil, err
	}
	currentStep := "langgraph"
	if step != "" && step != "null" && len(step) < 100 {
		currentStep = "langgraph step " + step
	}
	now := s.Now()
	// One statement: the thread's job (created or locked), the blobs, the checkpoint, and for
	// a new root-namespace checkpoint the job's next checkpoint version. A new job's first
	// root checkpoint is its version 1, set as the job is inserted (this statement's UPDATE
	// does not see a row its own INSERT made).
	sql := cachedSQL(langGraphSQLKey{op: "put", eventSeq: in.EventSeqSQL, onJobCreated: in.OnJobCreatedSQL, tail: tail}, func() string {
		eventSeq := "$13::bigint"
		if in.EventSeqSQL != "" {
			eventSeq = "coalesce(" + in.EventSeqSQL + ", $13::bigint)"
		}
		return `WITH ` + threadCTEs("$8", "$14", "$15", "$9", "CASE WHEN $3 = '' THEN 1 ELSE 0 END") + `, bl AS (
			INSERT INTO langgraph_blobs (org_id, job_id, checkpoint_ns, channel, version, type, blob, user_id)
			SELECT $1, $2, $3, b.channel, b.version, b.type, b.blob, j.subject
			FROM unnest($16::text[], $17::text[], $18::text[], $19::bytea[]) AS b (channel, version, type, blob), j
			ON CONFLICT (org_id, job_id, checkpoint_ns, channel, version) DO NOTHING
		), up AS (
			INSERT INTO langgraph_checkpoints AS c (org_id, job_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
				checkpoint, metadata, job_version, user_id, created_at, updated_at)
			SELECT $1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, CASE WHEN $3 = '' THEN j.checkpoint_version + 1 END,
				j.subject, $9, $9 FROM j
			ON CONFLICT (org_id, job_id, checkpoint_ns, checkpoint_id) DO UPDATE
				SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata, updated_at = EXCLUDED.updated_at
			RETURNING (c.xmax = 0) AS inserted, c.job_version
		), cp AS (
			INSERT INTO job_checkpoints (org_id, job_id, version, goal, current_step, next_action, state, event_seq,
				agent_id, user_id, created_at)
			SELECT $1, $2, up.job_version, j.goal, $10, $11, $12::jsonb, ` + eventSeq + `, $14, j.subject, $9
			FROM up, j WHERE up.inserted AND up.job_version IS NOT NULL
			RETURNING version
		), moved AS (
			UPDATE jobs SET checkpoint_version = coalesce((SELECT version FROM cp), checkpoint_version),
				progress_at = greatest(progress_at, $9), user_id = coalesce(user_id, $8)
			WHERE org_id = $1 AND job_id = $2 AND status = 'running' AND EXISTS (SELECT FROM locked)
		)` + onJobCreated(in.OnJobCreatedSQL) + tail
	})
	args := []any{org, jobID, in.CheckpointNS, in.CheckpointID, nullable(in.ParentCheckpointID), string(in.Checkpoint),
		string(orEmpty(in.Metadata, "{}")), nullable(in.UserID), now,
		currentStep, "continue the LangGraph thread from checkpoint " + in.CheckpointID, string(link), in.EventSeq,
		nullable(in.AgentID), nullable(in.SessionID), channels, versions, types, data}
	return sql, args, nil
}

// LangGraphPutWrites stores a task's pending writes against a checkpoint. A write whose
// (task, idx) is already stored keeps its first value, unless every write of the batch has a
// negative (special-channel) idx: then they replace the stored ones, as LangGraph's
// PostgresSaver does. The checkpoint need not exist yet (durability "async"); the job is
// created when it does not.
func (s *Store) LangGraphPutWrites(ctx context.Context, db pg.DBTX, org, jobID string, in LangGraphWrites) (int, bool, error) {
	sql, args, err := s.langGraphWritesSQL(org, jobID, in, writesResultSQL)
	if err != nil {
		return 0, false, err
	}
	var found, n int
	var created bool
	for attempt := 0; ; attempt++ {
		if err := db.QueryRow(ctx, sql, args...).Scan(&found, &created, &n); err != nil {
			return 0, false, pg.Interpret(err)
		}
		if found > 0 {
			return n, created, nil
		}
		if attempt > 0 { // the job is not running
			return 0, false, s.threadNotRunning(ctx, db, org, jobID)
		}
		// Another transaction created the job after this statement's snapshot: once more.
	}
}

// LangGraphPutWritesStatement is LangGraphPutWrites as one statement sent without reading
// its result, as LangGraphPutStatement is for LangGraphPut: it cannot say how many writes
// it stored, and where LangGraphPutWrites would answer an error or try once more, it fails
// on the server so that nothing commits.
func (s *Store) LangGraphPutWritesStatement(org, jobID string, in LangGraphWrites) (pg.Statement, error) {
	sql, args, err := s.langGraphWritesSQL(org, jobID, in, expectThreadSQL)
	if err != nil {
		return pg.Statement{}, err
	}
	return pg.Statement{SQL: sql, Args: args}, nil
}

// langGraphWritesSQL is the putWrites statement ending in tail, its final SELECT, and its
// arguments: its CTEs are created, locked, j (threadCTEs), ins and touched (and, with
// OnJobCreatedSQL, logged).
func (s *Store) langGraphWritesSQL(org, jobID string, in LangGraphWrites, tail string) (string, []any, error) {
	for _, f := range []struct{ name, v string }{{"checkpoint_ns", in.CheckpointNS}, {"checkpoint_id", in.CheckpointID},
		{"task_id", in.TaskID}, {"task_path", in.TaskPath}} {
		if err := strata.CheckText(f.name, f.v); err != nil {
			return "", nil, err
		}
	}
	if in.CheckpointID == "" {
		return "", nil, strata.Invalid("checkpoint_id", "is required")
	}
	if in.TaskID == "" {
		return "", nil, strata.Invalid("task_id", "is required")
	}
	idx := make([]int32, len(in.Writes))
	channels := make([]string, len(in.Writes))
	types := make([]string, len(in.Writes))
	data := make([][]byte, len(in.Writes))
	special := len(in.Writes) > 0
	for _, w := range in.Writes {
		if w.Idx >= 0 {
			special = false
		}
	}
	// One row per idx: a repeated idx in one batch keeps its first write, or its last when the
	// batch replaces (a statement may not upsert one row twice).
	at := map[int]int{}
	idx, channels, types, data = idx[:0], channels[:0], types[:0], data[:0]
	for _, w := range in.Writes {
		if w.Data == nil {
			w.Data = []byte{}
		}
		if i, ok := at[w.Idx]; ok {
			if special {
				channels[i], types[i], data[i] = w.Channel, w.Type, w.Data
			}
			continue
		}
		at[w.Idx] = len(idx)
		idx, channels, types, data = append(idx, int32(w.Idx)), append(channels, w.Channel), append(types, w.Type), append(data, w.Data)
	}
	conflict := `DO NOTHING`
	if special {
		conflict = `DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob, task_path = EXCLUDED.task_path`
	}
	now := s.Now()
	// One statement: the thread's job (created or locked), the writes, the job's progress.
	sql := cachedSQL(langGraphSQLKey{op: "writes", onJobCreated: in.OnJobCreatedSQL, conflict: conflict, tail: tail}, func() string {
		return `WITH ` + threadCTEs("$11", "$13", "$14", "$12", "0") + `, ins AS (
			INSERT INTO langgraph_writes (org_id, job_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob,
				task_path, user_id, created_at)
			SELECT $1, $2, $3, $4, $5, w.idx, w.channel, w.type, w.blob, $10, j.subject, $12
			FROM unnest($6::int[], $7::text[], $8::text[], $9::bytea[]) AS w (idx, channel, type, blob), j
			ON CONFLICT (org_id, job_id, checkpoint_ns, checkpoint_id, task_id, idx) ` + conflict + `
			RETURNING 1
		), touched AS (
			UPDATE jobs SET progress_at = $12
			WHERE org_id = $1 AND job_id = $2 AND progress_at < $12 AND status = 'running' AND EXISTS (SELECT FROM locked)
		)` + onJobCreated(in.OnJobCreatedSQL) + tail
	})
	args := []any{org, jobID, in.CheckpointNS, in.CheckpointID, in.TaskID, idx, channels, types, data, in.TaskPath,
		nullable(in.UserID), now, nullable(in.AgentID), nullable(in.SessionID)}
	return sql, args, nil
}

// onJobCreated is the CTE that runs sql when the statement's created CTE made the job (""
// without sql).
func onJobCreated(sql string) string {
	if sql == "" {
		return ""
	}
	return `, logged AS (` + sql + `)`
}

// langGraphSQLKey is what a put's or putWrites' statement text depends on.
type langGraphSQLKey struct {
	op, eventSeq, onJobCreated, conflict, tail string
}

// langGraphSQL caches the statements' texts (a handful: see langGraphSQLKey): built once,
// not concatenated again on every call.
var langGraphSQL sync.Map

func cachedSQL(k langGraphSQLKey, build func() string) string {
	if v, ok := langGraphSQL.Load(k); ok {
		return v.(string)
	}
	sql := build()
	langGraphSQL.Store(k, sql)
	return sql
}

// tupleCols and tupleFrom read a langgraph_checkpoints row (alias cp) with its channel
// values, pending writes and, for checkpoints older than format 4, the parent's pending
// sends: tupleQuery(the checkpoints' WHERE, ORDER BY and LIMIT). Each list comes as parallel
// arrays (bytea values in binary, no base64 or JSON in between), aggregated in LATERAL
// subqueries that run only for the checkpoints the query returns (selected first: a list that
// sorts does not aggregate the values of rows its LIMIT drops). A channel value is looked up by the blobs' primary key
// (LATERAL ... LIMIT 1): joined as a set, the planner hashed every blob of the thread.
const tupleCols = `cp.job_id, cp.checkpoint_ns, cp.checkpoint_id, coalesce(cp.parent_checkpoint_id, ''), cp.checkpoint,
	cp.metadata, coalesce(cp.job_version, 0), cp.created_at, vals.channel, vals.type, vals.blob,
	wr.task_id, wr.channel, wr.type, wr.blob, snd.channel, snd.type, snd.blob`

const tupleFrom = `
	CROSS JOIN LATERAL (SELECT array_agg(bl.channel) AS channel, array_agg(bl.type) AS type, array_agg(bl.blob) AS blob
		FROM jsonb_each_text(CASE WHEN jsonb_typeof(cp.checkpoint -> 'channel_versions') = 'object'
			THEN cp.checkpoint -> 'channel_versions' ELSE '{}' END) AS v
		CROSS JOIN LATERAL (SELECT bl.channel, bl.type, bl.blob FROM langgraph_blobs bl
			WHERE bl.org_id = cp.org_id AND bl.job_id = cp.job_id AND bl.checkpoint_ns = cp.checkpoint_ns
				AND bl.channel = v.key AND bl.version = v.value AND bl.type <> 'empty'
			LIMIT 1) AS bl) AS vals
	CROSS JOIN LATERAL (SELECT array_agg(w.task_id ORDER BY w.task_path, w.task_id, w.idx) AS task_id,
			array_agg(w.channel ORDER BY w.task_path, w.task_id, w.idx) AS channel,
			array_agg(w.type ORDER BY w.task_path, w.task_id, w.idx) AS type,
			array_agg(coalesce(w.blob, '') ORDER BY w.task_path, w.task_id, w.idx) AS blob
		FROM langgraph_writes w WHERE w.org_id = cp.org_id AND w.job_id = cp.job_id
			AND w.checkpoint_ns = cp.checkpoint_ns AND w.checkpoint_id = cp.checkpoint_id) AS wr
	CROSS JOIN LATERAL (SELECT array_agg(w.channel ORDER BY w.task_id, w.idx) AS channel,
			array_agg(w.type ORDER BY w.task_id, w.idx) AS type,
			array_agg(coalesce(w.blob, '') ORDER BY w.task_id, w.idx) AS blob
		FROM langgraph_writes w WHERE cp.parent_checkpoint_id IS NOT NULL
			AND jsonb_typeof(cp.checkpoint -> 'v') = 'number' AND (cp.checkpoint ->> 'v')::numeric < 4
			AND w.org_id = cp.org_id AND w.job_id = cp.job_id
			AND w.checkpoint_ns = cp.checkpoint_ns AND w.checkpoint_id = cp.parent_checkpoint_id
			AND w.channel = '` + LangGraphTasksChannel + `') AS snd`

// tupleQuery reads the tuples of the checkpoints (alias cp) that "WHERE ... ORDER BY ...
// LIMIT ..." selects, in that order.
func tupleQuery(where, order, limit string) string {
	return `SELECT ` + tupleCols + ` FROM (SELECT * FROM langgraph_checkpoints cp WHERE ` + where + `
		ORDER BY ` + order + ` LIMIT ` + limit + `) AS cp` + tupleFrom + `
		ORDER BY ` + order
}

func scanTuple(row pgx.Row) (LangGraphTuple, error) {
	var t LangGraphTuple
	var vc, vt, wt, wc, wty, sc, st []string
	var vb, wb, sb [][]byte
	if err := row.Scan(&t.ThreadID, &t.CheckpointNS, &t.CheckpointID, &t.ParentCheckpointID, &t.Checkpoint, &t.Metadata,
		&t.JobVersion, &t.CreatedAt, &vc, &vt, &vb, &wt, &wc, &wty, &wb, &sc, &st, &sb); err != nil {
		return LangGraphTuple{}, pg.Interpret(err)
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.ChannelValues = make([]LangGraphValue, len(vc))
	for i := range vc {
		t.ChannelValues[i] = LangGraphValue{Channel: vc[i], Type: vt[i], Data: orBytes(vb[i])}
	}
	t.PendingWrites = make([]LangGraphPendingWrite, len(wt))
	for i := range wt {
		t.PendingWrites[i] = LangGraphPendingWrite{TaskID: wt[i], Channel: wc[i], Type: wty[i], Data: orBytes(wb[i])}
	}
	if len(sc) > 0 {
		t.PendingSends = make([]LangGraphValue, len(sc))
		for i := range sc {
			t.PendingSends[i] = LangGraphValue{Channel: sc[i], Type: st[i], Data: orBytes(sb[i])}
		}
	}
	return t, nil
}

// orBytes is b, or an empty value for a NULL (answered as "", not null).
func orBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// LangGraphGet reads one checkpoint of a thread: checkpointID, or the latest (greatest id)
// of the namespace when it is "". ErrNotFound when there is none.
func (s *Store) LangGraphGet(ctx context.Context, db pg.DBTX, org, jobID, ns, checkpointID string) (LangGraphTuple, error) {
	if checkpointID != "" {
		return scanTuple(db.QueryRow(ctx, tupleQuery(`cp.org_id = $1 AND cp.job_id = $2 AND cp.checkpoint_ns = $3
			AND cp.checkpoint_id = $4`, `cp.checkpoint_id`, `1`), org, jobID, ns, checkpointID))
	}
	return scanTuple(db.QueryRow(ctx, tupleQuery(`cp.org_id = $1 AND cp.job_id = $2 AND cp.checkpoint_ns = $3`,
		`cp.checkpoint_id DESC`, `1`), org, jobID, ns))
}

// LangGraphList lists checkpoints, newest (greatest checkpoint id) first; ties across
// threads and namespaces break by thread then namespace, descending, so the cursor is exact.
// A filter that is not a JSON object and a cursor this list did not make are FieldErrors
// for "filter" and "cursor".
func (s *Store) LangGraphList(ctx context.Context, db pg.DBTX, org string, f LangGraphListFilter) ([]LangGraphTuple, error) {
	var metadata json.RawMessage
	if f.Filter != "" {
		if !json.Valid([]byte(f.Filter)) {
			return nil, strata.Invalid("filter", "must be a JSON object")
		}
		metadata = json.RawMessage(f.Filter)
	}
	var after *langGraphCursor
	if f.Cursor != "" {
		var c langGraphCursor
		raw, err := base64.RawURLEncoding.DecodeString(f.Cursor)
		if err != nil || json.Unmarshal(raw, &c) != nil || c.CheckpointID == "" {
			return nil, strata.Invalid("cursor", "must be a next_cursor this endpoint returned")
		}
		after = &c
	}
	if err := checkObject("filter", metadata, false); err != nil {
		return nil, err
	}
	args := []any{org}
	where := `cp.org_id = $1`
	add := func(cond string, v ...any) {
		for _, x := range v {
			args = append(args, x)
			cond = replaceArg(cond, len(args))
		}
		where += ` AND ` + cond
	}
	if f.ThreadID != "" {
		add(`cp.job_id = $?`, f.ThreadID)
	}
	if f.CheckpointNS != nil {
		add(`cp.checkpoint_ns = $?`, *f.CheckpointNS)
	}
	if f.CheckpointID != "" {
		add(`cp.checkpoint_id = $?`, f.CheckpointID)
	}
	if f.Before != "" {
		add(`cp.checkpoint_id < $?`, f.Before)
	}
	if len(bytes.TrimSpace(metadata)) > 0 && string(bytes.TrimSpace(metadata)) != "{}" {
		add(`cp.metadata @> $?::jsonb`, string(metadata))
	}
	if after != nil {
		add(`(cp.checkpoint_id, cp.job_id, cp.checkpoint_ns) < ($?, $?, $?)`, after.CheckpointID, after.ThreadID, after.CheckpointNS)
	}
	args = append(args, f.Limit)
	rows, err := db.Query(ctx, tupleQuery(where, `cp.checkpoint_id DESC, cp.job_id DESC, cp.checkpoint_ns DESC`,
		`$`+strconv.Itoa(len(args))), args...)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LangGraphTuple, error) { return scanTuple(r) })
	return out, pg.Interpret(err)
}

// replaceArg replaces the first "$?" in cond with $n.
func replaceArg(cond string, n int) string {
	i := bytes.Index([]byte(cond), []byte("$?"))
	if i < 0 {
		return cond
	}
	return cond[:i] + "$" + strconv.Itoa(n) + cond[i+2:]
}

// LangGraphDeleteThread deletes a thread: its job and, by cascade, everything of it
// (LangGraph checkpoints, blobs and writes; job checkpoints, steps, handoffs). The job's
// episodic log is append-only and stays (erasure removes it). A thread that does not exist
// is deleted already (false). A job that has forks cannot be deleted (409).
func (s *Store) LangGraphDeleteThread(ctx context.Context, db pg.DBTX, org, jobID string) (bool, error) {
	var forks []string
	rows, err := db.Query(ctx, `SELECT job_id FROM jobs WHERE org_id = $1 AND parent_job_id = $2 ORDER BY job_id LIMIT 10`, org, jobID)
	if err != nil {
		return false, pg.Interpret(err)
	}
	if forks, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return false, pg.Interpret(err)
	}
	if len(forks) > 0 {
		return false, strata.Conflict("job "+jobID+" has forks; delete them first", map[string]any{"forks": forks})
	}
	tag, err := db.Exec(ctx, `DELETE FROM jobs WHERE org_id = $1 AND job_id = $2`, org, jobID)
	if err != nil {
		return false, pg.Interpret(err)
	}
	return tag.RowsAffected() > 0, nil
}
