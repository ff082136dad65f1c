package gdpr

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/working"
)

// ExportFormat names the export's line format (docs/compliance.md).
const ExportFormat = "strata-export/1"

// ExportHeader is the export's first line.
type ExportHeader struct {
	Type    string `json:"type"` // "export"
	Format  string `json:"format"`
	OrgID   string `json:"org_id"`
	UserID  string `json:"user_id"`
	Subject string `json:"subject" doc:"The audit pseudonym: audit records of the subject carry it."`
	// Previous are the subject's pseudonyms under earlier pseudonym keys
	// (STRATA_PSEUDONYM_PREVIOUS_KEYS): audit records written before a rotation carry them.
	Previous    []string  `json:"-"`
	GeneratedAt time.Time `json:"generated_at"`
	Restricted  bool      `json:"restricted"`
}

// ExportSummary is the export's last line: how many records of each type it holds, so a
// reader can check it got everything.
type ExportSummary struct {
	Type    string           `json:"type"` // "summary"
	Records int64            `json:"records"`
	Counts  map[string]int64 `json:"counts"`
}

// section is one query of the export: each row is (id, data jsonb, provenance jsonb).
// Parameters: $1 org, $2 user, $3 the subject's job tree, $4 the subject's pseudonyms (the
// current key's first, then those of earlier keys).
type section struct {
	tier, typ, sql string
}

// Vectors (embeddings), generated columns (tsv) and hashes of content are not exported;
// the embedding space that made the vector is.
var sections = []section{
	{"working", "turn", `SELECT session_id || '/' || seq, to_jsonb(t) - 'org_id',
		jsonb_build_object('at', created_at, 'session_id', session_id)
		FROM working_turns t WHERE org_id = $1 AND user_id = $2 ORDER BY session_id, seq`},
	{"jobs", "job", `SELECT job_id, to_jsonb(j) - 'org_id',
		jsonb_build_object('agent_id', agent_id, 'owner', owner, 'at', created_at, 'forked_from', parent_job_id)
		FROM jobs j WHERE org_id = $1 AND job_id = ANY($3) ORDER BY job_id`},
	{"jobs", "checkpoint", `SELECT job_id || '@' || version, to_jsonb(c) - 'org_id',
		jsonb_build_object('agent_id', agent_id, 'job_id', job_id, 'at', created_at)
		FROM job_checkpoints c WHERE org_id = $1 AND (job_id = ANY($3) OR user_id = $2) ORDER BY job_id, version`},
	{"jobs", "step", `SELECT job_id || '/' || step_id, to_jsonb(s) - 'org_id',
		jsonb_build_object('agent_id', owner, 'job_id', job_id, 'at', started_at)
		FROM job_steps s WHERE org_id = $1 AND job_id = ANY($3) ORDER BY job_id, step_id`},
	{"jobs", "step_attempt", `SELECT job_id || '/' || step_id || '#' || fencing_token, to_jsonb(a) - 'org_id',
		jsonb_build_object('agent_id', owner, 'job_id', job_id, 'at', acquired_at)
		FROM job_step_attempts a WHERE org_id = $1 AND job_id = ANY($3) ORDER BY job_id, step_id, fencing_token`},
	{"jobs", "handoff", `SELECT job_id || '/' || handoff_id, to_jsonb(h) - 'org_id',
		jsonb_build_object('agent_id', from_agent, 'job_id', job_id, 'at', created_at)
		FROM job_handoffs h WHERE org_id = $1 AND job_id = ANY($3) ORDER BY job_id, handoff_id`},
	{"jobs", "outbox", `SELECT job_id || '/' || kind, to_jsonb(o) - 'org_id',
		jsonb_build_object('job_id', job_id, 'at', created_at)
		FROM job_outbox o WHERE org_id = $1 AND (job_id = ANY($3) OR user_id = $2) ORDER BY id`},
	{"jobs", "langgraph_checkpoint", `SELECT job_id || '/' || checkpoint_ns || '/' || checkpoint_id, to_jsonb(c) - 'org_id',
		jsonb_build_object('job_id', job_id, 'at', created_at)
		FROM langgraph_checkpoints c WHERE org_id = $1 AND (job_id = ANY($3) OR user_id = $2) ORDER BY job_id, checkpoint_ns, checkpoint_id`},
	{"jobs", "langgraph_blob", `SELECT job_id || '/' || checkpoint_ns || '/' || channel || '@' || version,
		(to_jsonb(b) - 'org_id' - 'blob') || jsonb_build_object('blob_base64', encode(blob, 'base64')),
		jsonb_build_object('job_id', job_id)
		FROM langgraph_blobs b WHERE org_id = $1 AND (job_id = ANY($3) OR user_id = $2) ORDER BY job_id, checkpoint_ns, channel, version`},
	{"jobs", "langgraph_write", `SELECT job_id || '/' || checkpoint_ns || '/' || checkpoint_id || '/' || task_id || '#' || idx,
		(to_jsonb(w) - 'org_id' - 'blob') || jsonb_build_object('blob_base64', encode(blob, 'base64')),
		jsonb_build_object('job_id', job_id, 'at', created_at)
		FROM langgraph_writes w WHERE org_id = $1 AND (job_id = ANY($3) OR user_id = $2)
		ORDER BY job_id, checkpoint_ns, checkpoint_id, task_id, idx`},
	{"jobs", "consolidation", `SELECT job_id, to_jsonb(c) - 'org_id', jsonb_build_object('job_id', job_id, 'at', summarized_at)
		FROM job_consolidation c WHERE org_id = $1 AND job_id = ANY($3) ORDER BY job_id`},
	{"episodic", "event", `SELECT job_id || '#' || seq,
		(to_jsonb(e) - 'org_id' - 'fingerprint') || jsonb_build_object('fingerprint', encode(fingerprint, 'hex')),
		jsonb_build_object('agent_id', agent_id, 'job_id', job_id, 'event_seq', seq, 'at', created_at)
		FROM episodic_events e WHERE org_id = $1 AND (job_id = ANY($3) OR user_id = $2) ORDER BY job_id, seq`},
	{"episodic", "asset", `SELECT asset_id, to_jsonb(a) - 'org_id',
		jsonb_build_object('agent_id', agent_id, 'job_id', job_id, 'event_seq', event_seq, 'at', updated_at)
		FROM assets a WHERE org_id = $1 AND user_id = $2 ORDER BY asset_id`},
	{"episodic", "asset_version", `SELECT asset_id || '@' || version, to_jsonb(v) - 'org_id',
		jsonb_build_object('agent_id', agent_id, 'job_id', job_id, 'event_seq', event_seq, 'at', created_at)
		FROM asset_versions v WHERE org_id = $1 AND (user_id = $2
			OR asset_id IN (SELECT asset_id FROM assets WHERE org_id = $1 AND user_id = $2)) ORDER BY asset_id, version`},
	{"keyvalue", "entry", `SELECT namespace || '/' || key || '@' || level || ':' || scope_id, to_jsonb(k) - 'org_id',
		jsonb_build_object('key_id', updated_by, 'agent_id', agent_id, 'at', updated_at)
		FROM kv_entries k WHERE org_id = $1 AND (user_id = $2 OR (level = 'user' AND scope_id = $2))
		ORDER BY namespace, key, level, scope_id`},
	{"keyvalue", "version", `SELECT namespace || '/' || key || '@' || level || ':' || scope_id || '#' || version,
		to_jsonb(k) - 'org_id', jsonb_build_object('key_id', written_by, 'agent_id', agent_id, 'at', written_at, 'op', op)
		FROM kv_versions k WHERE org_id = $1 AND (user_id = $2 OR (level = 'user' AND scope_id = $2))
		ORDER BY namespace, key, level, scope_id, version`},
	{"graph", "entity", `SELECT id::text, to_jsonb(e) - 'org_id' - 'embedding',
		jsonb_build_object('agent_id', agent_id, 'session_id', session_id, 'memory_ids', source_memory_ids, 'at', created_at)
		FROM graph_entities e WHERE org_id = $1 AND user_id = $2 ORDER BY id`},
	{"graph", "relation", `SELECT id::text, to_jsonb(r) - 'org_id',
		jsonb_build_object('agent_id', agent_id, 'memory_id', source_memory_id, 'job_id', nullif(source_job_id, ''),
			'event_seq', source_event_seq, 'at', recorded_at)
		FROM graph_relations r WHERE org_id = $1 AND user_id = $2 ORDER BY recorded_at, id`},
	{"semantic", "memory", `SELECT id::text,
		to_jsonb(m) - 'org_id' - 'embedding' - 'embedding_next' - 'tsv' - 'text_hash',
		jsonb_build_object('key_id', created_by_key, 'agent_id', source_agent_id, 'job_id', source_job_id,
			'event_seq', source_event_seq, 'at', valid_from)
		FROM memories m WHERE org_id = $1 AND user_id = $2 ORDER BY root_id, version`},
	{"semantic", "retrieval", `SELECT id::text, to_jsonb(r) - 'org_id',
		jsonb_build_object('key_id', key_id, 'agent_id', agent_id, 'job_id', job_id, 'at', served_at)
		FROM memory_retrievals r WHERE org_id = $1 AND user_id = $2 ORDER BY id`},
	{"extraction", "state", `SELECT session_id, to_jsonb(x) - 'org_id',
		jsonb_build_object('agent_id', agent_id, 'session_id', session_id, 'at', updated_at)
		FROM extraction_state x WHERE org_id = $1 AND user_id = $2 ORDER BY session_id`},
	{"extraction", "provenance", `SELECT id::text, to_jsonb(p) - 'org_id',
		jsonb_build_object('key_id', written_by, 'agent_id', agent_id, 'session_id', session_id, 'turn_seqs', turn_seqs,
			'model', model, 'prompt_version', prompt_version, 'at', created_at)
		FROM extraction_provenance p WHERE org_id = $1 AND user_id = $2 ORDER BY id`},
	{"summaries", "summary", `SELECT subject_kind || '/' || subject_id || '@' || version, to_jsonb(s) - 'org_id',
		jsonb_build_object('agent_id', agent_id, 'summarizer', summarizer, 'prompt_version', prompt_version,
			'from_seq', from_seq, 'to_seq', to_seq, 'at', created_at)
		FROM summaries s WHERE org_id = $1 AND user_id = $2 ORDER BY subject_kind, subject_id, version`},
	{"idempotency", "stored_response", `SELECT key, jsonb_build_object('method', method, 'path', path,
			'status', response_status, 'created_at', created_at, 'expires_at', expires_at),
		jsonb_build_object('at', created_at)
		FROM idempotency_keys WHERE org_id = $1 AND user_id = $2 ORDER BY created_at, key`},
	{"audit", "record", `SELECT id::text, to_jsonb(a) - 'org_id' - 'prev_hash' - 'hash',
		jsonb_build_object('key_id', actor_key_id, 'agent_id', agent_id, 'at', at)
		FROM audit_log a WHERE org_id = $1 AND subject = ANY($4) ORDER BY id`},
	{"gdpr", "restriction", `SELECT user_id, to_jsonb(r) - 'org_id', jsonb_build_object('key_id', restricted_by, 'at', restricted_at)
		FROM gdpr_restrictions r WHERE org_id = $1 AND user_id = $2`},
	{"gdpr", "erasure", `SELECT id, to_jsonb(e) - 'org_id' - 'lease_owner' - 'lease_until' - 'enqueued_at',
		jsonb_build_object('key_id', requested_by, 'at', requested_at)
		FROM gdpr_erasures e WHERE org_id = $1 AND subject = ANY($4) ORDER BY id`},
}

type lineWriter struct {
	w       *bufio.Writer
	summary ExportSummary
}

func (l *lineWriter) record(tier, typ, id string, data, prov []byte) error {
	idj, err := json.Marshal(id)
	if err != nil {
		return err
	}
	l.w.WriteString(`{"tier":"` + tier + `","type":"` + typ + `","id":`)
	l.w.Write(idj)
	l.w.WriteString(`,"data":`)
	l.w.Write(data)
	if len(prov) > 0 {
		l.w.WriteString(`,"provenance":`)
		l.w.Write(prov)
	}
	_, err = l.w.WriteString("}\n")
	l.summary.Records++
	l.summary.Counts[tier+"."+typ]++
	return err
}

func (l *lineWriter) value(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	l.w.Write(b)
	return l.w.WriteByte('\n')
}

// Export writes everything Strata holds about user in org to w as NDJSON: a header line,
// one line per record ({"tier","type","id","data","provenance"}), and a summary line. It
// reads row by row (memory stays bounded whatever the subject's volume) inside tx, which
// should be a REPEATABLE READ transaction so every section sees one snapshot.
func Export(ctx context.Context, tx pgx.Tx, ws *working.Store, h ExportHeader, w io.Writer) (ExportSummary, error) {
	l := &lineWriter{w: bufio.NewWriterSize(w, 64<<10), summary: ExportSummary{Type: "summary", Counts: map[string]int64{}}}
	h.Type, h.Format = "export", ExportFormat
	if err := l.value(h); err != nil {
		return l.summary, err
	}
	org, user := h.OrgID, h.UserID
	tree, err := subjectJobTree(ctx, tx, org, user)
	if err != nil {
		return l.summary, err
	}
	if tree == nil {
		tree = []string{}
	}
	err = ws.StreamUserSessions(ctx, tx, org, user, func(s working.ExportSession) error {
		data, err := json.Marshal(s)
		if err != nil {
			return err
		}
		prov, _ := json.Marshal(map[string]any{"agent_id": s.AgentID, "at": s.UpdatedAt, "source": s.Source})
		return l.record("working", "session", s.SessionID, data, prov)
	})
	if err != nil {
		return l.summary, err
	}
	for _, s := range sections {
		if err := l.section(ctx, tx, s, org, user, tree, append([]string{h.Subject}, h.Previous...)); err != nil {
			return l.summary, err
		}
	}
	if err := l.value(l.summary); err != nil {
		return l.summary, err
	}
	return l.summary, l.w.Flush()
}

func (l *lineWriter) section(ctx context.Context, tx pgx.Tx, s section, org, user string, tree []string, subjects []string) error {
	// Postgres must infer every parameter's type, so pass only the ones the query uses
	// (renumbered in order).
	sql, args := s.sql, []any{}
	all := []any{org, user, tree, subjects}
	for i := range all {
		ph := "$" + strconv.Itoa(i+1)
		if strings.Contains(sql, ph) {
			args = append(args, all[i])
			sql = strings.ReplaceAll(sql, ph, "$\x00"+strconv.Itoa(len(args)))
		}
	}
	sql = strings.ReplaceAll(sql, "$\x00", "$")
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return pg.Interpret(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var data, prov []byte
		if err := rows.Scan(&id, &data, &prov); err != nil {
			return pg.Interpret(err)
		}
		if err := l.record(s.tier, s.typ, id, data, prov); err != nil {
			return err
		}
	}
	return pg.Interpret(rows.Err())
}
