package summaries

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Kinds of subject a summary is about.
const (
	KindSession = "session"
	KindJob     = "job"
)

// MaxTextBytes bounds a summary's text.
const MaxTextBytes = 64 << 10

// Summary is one version of a subject's summary.
type Summary struct {
	Kind          string    `json:"kind" enum:"session,job"`
	SubjectID     string    `json:"subject_id" doc:"The session or job summarised."`
	Version       int64     `json:"version" doc:"1 for the first summary; every new summary of the subject is the next version."`
	UserID        string    `json:"user_id,omitempty"`
	AgentID       string    `json:"agent_id,omitempty"`
	FromSeq       int64     `json:"from_seq" doc:"First seq (turn or event) the summary covers."`
	AddedFrom     int64     `json:"added_from" doc:"First seq this version added to the previous one (from_seq for version 1)."`
	ToSeq         int64     `json:"to_seq" doc:"Last seq the summary covers: everything from from_seq through to_seq."`
	Items         int       `json:"items" doc:"Turns or events the summary was written from."`
	Text          string    `json:"text"`
	Tokens        int       `json:"tokens" doc:"Tokens of text (cl100k_base)."`
	Summarizer    string    `json:"summarizer" doc:"extractive, or llm:<model>."`
	PromptVersion string    `json:"prompt_version,omitempty" doc:"The prompt an LLM summary was written with."`
	Fallback      string    `json:"fallback,omitempty" doc:"Why an LLM summary fell back to the extractive one (the model's answer was unusable after retries)."`
	CreatedAt     time.Time `json:"created_at"`
}

// New is a summary to write: the next version of its subject.
type New struct {
	Kind, SubjectID       string
	UserID, AgentID       string
	FromSeq, AddedFrom    int64
	ToSeq                 int64
	Items                 int
	Text                  string
	Tokens                int
	Summarizer, PromptVer string
	Fallback              string
	At                    time.Time
}

func checkKind(kind string) error {
	if kind != KindSession && kind != KindJob {
		return strata.Invalid("kind", "must be session or job")
	}
	return nil
}

func checkSubject(kind, id string) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	return strata.CheckID(kind, id, false)
}

const cols = `subject_kind, subject_id, version, coalesce(user_id, ''), coalesce(agent_id, ''), from_seq, added_from,
	to_seq, items, text, tokens, summarizer, coalesce(prompt_version, ''), coalesce(fallback, ''), created_at`

func scan(r pgx.Row) (Summary, error) {
	var s Summary
	err := r.Scan(&s.Kind, &s.SubjectID, &s.Version, &s.UserID, &s.AgentID, &s.FromSeq, &s.AddedFrom, &s.ToSeq,
		&s.Items, &s.Text, &s.Tokens, &s.Summarizer, &s.PromptVersion, &s.Fallback, &s.CreatedAt)
	s.CreatedAt = s.CreatedAt.UTC()
	return s, err
}

// Latest is the subject's newest summary (strata.ErrNotFound when it has none).
func Latest(ctx context.Context, db pg.DBTX, org, kind, id string) (Summary, error) {
	if err := checkSubject(kind, id); err != nil {
		return Summary{}, err
	}
	s, err := scan(db.QueryRow(ctx, `SELECT `+cols+` FROM summaries
		WHERE org_id = $1 AND subject_kind = $2 AND subject_id = $3 ORDER BY version DESC LIMIT 1`, org, kind, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Summary{}, strata.ErrNotFound
	}
	return s, pg.Interpret(err)
}

// LatestResult is what QueueLatest reads: Found false when the subject has no summary.
type LatestResult struct {
	Summary Summary
	Found   bool
	Err     error
}

// QueueLatest queues the read of the subject's newest summary into b (per-turn context
// reads it in its first round trip).
func QueueLatest(b *pgx.Batch, org, kind, id string, res *LatestResult) {
	b.Queue(`SELECT `+cols+` FROM summaries
		WHERE org_id = $1 AND subject_kind = $2 AND subject_id = $3 ORDER BY version DESC LIMIT 1`, org, kind, id).
		QueryRow(func(r pgx.Row) error {
			s, err := scan(r)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				res.Err = pg.Interpret(err)
			default:
				res.Summary, res.Found = s, true
			}
			return nil
		})
}

// Versions pages through the subject's summaries, newest first, below version before (0:
// from the newest).
func Versions(ctx context.Context, db pg.DBTX, org, kind, id string, before int64, limit int) ([]Summary, error) {
	if err := checkSubject(kind, id); err != nil {
		return nil, err
	}
	if before <= 0 {
		before = 1 << 62
	}
	rows, err := db.Query(ctx, `SELECT `+cols+` FROM summaries
		WHERE org_id = $1 AND subject_kind = $2 AND subject_id = $3 AND version < $4 ORDER BY version DESC LIMIT $5`,
		org, kind, id, before, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Summary, error) { return scan(r) })
	if out == nil {
		out = []Summary{}
	}
	return out, pg.Interpret(err)
}

// Write stores n as version after+1 of its subject. after is the version it builds on (0:
// none yet); when the subject's newest version is another, it is a strata.ConflictError
// and nothing is written.
func Write(ctx context.Context, tx pg.DBTX, org string, n New, after int64) (Summary, error) {
	if err := checkSubject(n.Kind, n.SubjectID); err != nil {
		return Summary{}, err
	}
	for _, f := range []struct{ name, v string }{{"user_id", n.UserID}, {"agent_id", n.AgentID}} {
		if err := strata.CheckID(f.name, f.v, true); err != nil {
			return Summary{}, err
		}
	}
	switch {
	case n.FromSeq < 1:
		return Summary{}, strata.Invalid("from_seq", "must be at least 1")
	case n.AddedFrom < n.FromSeq:
		return Summary{}, strata.Invalid("added_from", "must not be below from_seq")
	case n.ToSeq < n.AddedFrom:
		return Summary{}, strata.Invalid("to_seq", "must not be below added_from")
	case n.Summarizer == "":
		return Summary{}, strata.Invalid("summarizer", "is required")
	case n.Items < 0 || n.Tokens < 0:
		return Summary{}, strata.Invalid("items", "must not be negative")
	}
	if err := strata.CheckText("text", n.Text); err != nil {
		return Summary{}, err
	}
	if len(n.Text) > MaxTextBytes {
		return Summary{}, strata.TooLarge("text", "is %d bytes; the limit is %d", len(n.Text), MaxTextBytes)
	}
	at := n.At
	if at.IsZero() {
		at = time.Now()
	}
	s, err := scan(tx.QueryRow(ctx, `INSERT INTO summaries (org_id, subject_kind, subject_id, version, user_id, agent_id,
			from_seq, added_from, to_seq, items, text, tokens, summarizer, prompt_version, fallback, created_at)
		SELECT $1, $2, $3, $4 + 1, nullif($5, ''), nullif($6, ''), $7, $8, $9, $10, $11, $12, $13, nullif($14, ''), nullif($15, ''), $16
		WHERE coalesce((SELECT max(version) FROM summaries WHERE org_id = $1 AND subject_kind = $2 AND subject_id = $3), 0) = $4
		ON CONFLICT (org_id, subject_kind, subject_id, version) DO NOTHING
		RETURNING `+cols, org, n.Kind, n.SubjectID, after, n.UserID, n.AgentID, n.FromSeq, n.AddedFrom, n.ToSeq,
		n.Items, n.Text, n.Tokens, n.Summarizer, n.PromptVer, n.Fallback, at.UTC().Truncate(time.Microsecond)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Summary{}, strata.Conflict(fmt.Sprintf("the %s's summary moved past version %d", n.Kind, after),
			map[string]any{"expected_version": after})
	}
	return s, pg.Interpret(err)
}

// Candidate is a subject whose log reached head; Due keeps those whose newest summary
// covers less than upTo.
type Candidate struct {
	ID   string
	UpTo int64 // the seq a new summary would cover through
}

// Due returns the candidates of kind whose newest summary's to_seq is at least step below
// their UpTo (or that have none and UpTo >= step), with that summary's to_seq.
func Due(ctx context.Context, db pg.DBTX, org, kind string, cands []Candidate, step int64) ([]Candidate, []int64, error) {
	if err := checkKind(kind); err != nil || len(cands) == 0 {
		return nil, nil, err
	}
	ids := make([]string, len(cands))
	ups := make([]int64, len(cands))
	for i, c := range cands {
		ids[i], ups[i] = c.ID, c.UpTo
	}
	rows, err := db.Query(ctx, `SELECT c.id, c.up_to, coalesce(s.to_seq, 0)
		FROM unnest($3::text[], $4::bigint[]) AS c(id, up_to)
		LEFT JOIN LATERAL (SELECT to_seq FROM summaries WHERE org_id = $1 AND subject_kind = $2 AND subject_id = c.id
			ORDER BY version DESC LIMIT 1) s ON true
		WHERE c.up_to - coalesce(s.to_seq, 0) >= $5 ORDER BY c.id`, org, kind, ids, ups, max(step, 1))
	if err != nil {
		return nil, nil, pg.Interpret(err)
	}
	defer rows.Close()
	var out []Candidate
	var covered []int64
	for rows.Next() {
		var c Candidate
		var to int64
		if err := rows.Scan(&c.ID, &c.UpTo, &to); err != nil {
			return nil, nil, pg.Interpret(err)
		}
		out, covered = append(out, c), append(covered, to)
	}
	return out, covered, pg.Interpret(rows.Err())
}

// EraseUser deletes every summary of the subject user in org (GDPR Art. 17) and answers
// how many versions went.
func EraseUser(ctx context.Context, tx pg.DBTX, org, user string) (int64, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM summaries WHERE org_id = $1 AND user_id = $2`, org, user)
	return tag.RowsAffected(), pg.Interpret(err)
}

// EraseSubject deletes every summary of one session or job (its deletion or erasure).
func EraseSubject(ctx context.Context, tx pg.DBTX, org, kind, id string) (int64, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM summaries WHERE org_id = $1 AND subject_kind = $2 AND subject_id = $3`, org, kind, id)
	return tag.RowsAffected(), pg.Interpret(err)
}
