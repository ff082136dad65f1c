package semantic

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Provenance classes of the memory list (ListFilter.Provenance).
const (
	ProvenanceExtracted    = "extracted"    // extracted by the org's LLM from conversation turns (trust extracted)
	ProvenanceConsolidated = "consolidated" // written by consolidation (job summaries, merges, promotions)
	ProvenanceWritten      = "written"      // written through the API by a key (neither of the above)
)

// ListFilter selects the current memories of a browse (Mem0's get_all). Scope fields
// match exactly (user_id U lists U's memories at every agent and session; it does not
// compose scopes as search does); empty fields do not filter.
type ListFilter struct {
	UserID, AgentID, SessionID string
	Kind                       string
	Trust                      string
	Provenance                 string // "", extracted, consolidated, written
	KeyID                      string // only versions written by this key
	CreatedAfter               *time.Time
	CreatedBefore              *time.Time
	Cursor                     string // next_cursor of the previous page
	Limit                      int
}

// ListCursor is the keyset cursor after m: its (valid_from, id), newest first.
func ListCursor(m Memory) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(m.ValidFrom.UnixMicro(), 10) + "_" + m.ID.String()))
}

func parseListCursor(c string) (time.Time, uuid.UUID, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, uuid.Nil, strata.Invalid("cursor", "is not a cursor this list gave out")
	}
	ts, id, ok := strings.Cut(string(raw), "_")
	us, err1 := strconv.ParseInt(ts, 10, 64)
	u, err2 := uuid.Parse(id)
	if !ok || err1 != nil || err2 != nil {
		return time.Time{}, uuid.Nil, strata.Invalid("cursor", "is not a cursor this list gave out")
	}
	return time.UnixMicro(us).UTC(), u, nil
}

// List pages through the org's current memory versions matching f, newest first (by when
// the version was written, then id): a keyset on (valid_from, id), so pages stay stable
// while memories are written. It returns up to f.Limit memories; field errors name the
// filter (kind, trust, provenance, created_after, cursor).
func (s *Store) List(ctx context.Context, q pg.DBTX, org string, f ListFilter) ([]Memory, error) {
	for _, x := range []struct{ name, v string }{{"user_id", f.UserID}, {"agent_id", f.AgentID},
		{"session_id", f.SessionID}, {"kind", f.Kind}} {
		if err := strata.CheckID(x.name, x.v, true); err != nil {
			return nil, err
		}
	}
	if f.Trust != "" && !ValidTrust(f.Trust) {
		return nil, strata.Invalid("trust", "must be one of %s", strings.Join(Trusts, ", "))
	}
	if f.CreatedAfter != nil && f.CreatedBefore != nil && !f.CreatedAfter.Before(*f.CreatedBefore) {
		return nil, strata.Invalid("created_after", "must be before created_before")
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var fl filter
	fl.add("org_id = ?", org)
	fl.add("valid_to IS NULL")
	for _, x := range []struct{ col, v string }{{"user_id", f.UserID}, {"agent_id", f.AgentID},
		{"session_id", f.SessionID}, {"kind", f.Kind}, {"trust", f.Trust}, {"created_by_key", f.KeyID}} {
		if x.v != "" {
			fl.add(x.col+" = ?", x.v)
		}
	}
	switch f.Provenance {
	case "":
	case ProvenanceExtracted:
		fl.add("trust = 'extracted'")
	case ProvenanceConsolidated:
		fl.add("trust <> 'extracted' AND created_by_key = 'worker:consolidation'")
	case ProvenanceWritten:
		fl.add("trust <> 'extracted' AND created_by_key NOT LIKE 'worker:%'")
	default:
		return nil, strata.Invalid("provenance", "must be extracted, consolidated or written")
	}
	if f.CreatedAfter != nil {
		fl.add("valid_from > ?", f.CreatedAfter.UTC())
	}
	if f.CreatedBefore != nil {
		fl.add("valid_from < ?", f.CreatedBefore.UTC())
	}
	if f.Cursor != "" {
		ts, id, err := parseListCursor(f.Cursor)
		if err != nil {
			return nil, err
		}
		fl.add("(valid_from, id) < (?, ?)", ts, id)
	}
	sql := `SELECT ` + memCols + ` FROM memories WHERE ` + fl.sql() + ` ORDER BY valid_from DESC, id DESC LIMIT ` +
		strconv.Itoa(f.Limit)
	rows, err := q.Query(ctx, sql, fl.args...)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	out := []Memory{}
	for rows.Next() {
		m, err := scanMemory(rows)
		if err != nil {
			return nil, pg.Interpret(err)
		}
		out = append(out, m)
	}
	return out, pg.Interpret(rows.Err())
}
