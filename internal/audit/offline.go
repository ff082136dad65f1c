package audit

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
)

// ChainRecord is one chained record exactly as its hash covers it: the export format of
// GET /v1/audit/export and of `strata audit export` files (one JSON object per line,
// seq order). Details is the text Postgres gave the hash (jsonb's own rendering), kept as
// a string so no JSON re-encoding can change it.
type ChainRecord struct {
	OrgID      string    `json:"org_id"`
	Seq        int64     `json:"seq"`
	ID         int64     `json:"id"`
	At         time.Time `json:"at"`
	ActorKeyID string    `json:"actor_key_id"`
	ActorRole  string    `json:"actor_role"`
	AgentID    string    `json:"agent_id,omitempty"`
	Action     string    `json:"action"`
	EntityType string    `json:"entity_type"`
	EntityID   string    `json:"entity_id,omitempty"`
	RequestID  string    `json:"request_id,omitempty"`
	Subject    string    `json:"subject,omitempty"`
	Status     int       `json:"status,omitempty"`
	Details    string    `json:"details" doc:"The record's details as the hashed JSON text."`
	PrevHash   string    `json:"prev_hash"`
	Hash       string    `json:"hash"`
}

// ListChain returns org's chained records with seq above afterSeq, in seq order.
func ListChain(ctx context.Context, q pg.DBTX, org string, afterSeq int64, limit int) ([]ChainRecord, error) {
	rows, err := q.Query(ctx, `SELECT seq, coalesce(encode(prev_hash, 'hex'), ''), encode(hash, 'hex'), `+chainCols+`
		FROM audit_log WHERE org_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, org, afterSeq, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChainRecord, error) {
		c := ChainRecord{OrgID: org}
		err := r.Scan(&c.Seq, &c.PrevHash, &c.Hash, &c.ID, &c.At, &c.ActorKeyID, &c.ActorRole, &c.AgentID, &c.Action,
			&c.EntityType, &c.EntityID, &c.RequestID, &c.Subject, &c.Status, &c.Details)
		return c, err
	})
	return recs, pg.Interpret(err)
}

func (c ChainRecord) row() chainRow {
	return chainRow{id: c.ID, at: c.At, actor: c.ActorKeyID, role: c.ActorRole, agent: c.AgentID, action: c.Action,
		etype: c.EntityType, eid: c.EntityID, rid: c.RequestID, subj: c.Subject, status: c.Status, details: c.Details}
}

// Outcomes of an offline verification.
const (
	StatusIntact     = "intact"     // every record verifies and the newest is covered by an anchor
	StatusUnanchored = "unanchored" // the anchored part verifies; newer records are not covered by any anchor
	StatusBroken     = "broken"     // a record was edited, removed or re-chained, or an anchor does not match
)

// OfflineReport is the result of VerifyExport.
type OfflineReport struct {
	Status       string     `json:"status"`
	OrgID        string     `json:"org_id"`
	Checked      int64      `json:"checked"`
	LastSeq      int64      `json:"last_seq"`
	Anchors      int        `json:"anchors_checked"`
	NewestAnchor *Anchor    `json:"newest_anchor,omitempty"`
	Unanchored   int64      `json:"unanchored" doc:"Records newer than the newest anchor: their removal could not be detected."`
	FirstBroken  *BrokenRef `json:"first_broken,omitempty"`
}

// ReadAnchors reads anchor JSON lines (the file sink's format; blank lines skipped).
func ReadAnchors(r io.Reader) ([]Anchor, error) {
	var out []Anchor
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var a Anchor
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return nil, fmt.Errorf("anchors line %d: %w (each line must be one anchor as STRATA_AUDIT_ANCHOR_FILE writes it)", n, err)
		}
		out = append(out, a)
	}
	return out, sc.Err()
}

// ExportReader reads an export (ChainRecord JSON lines) one record at a time.
type ExportReader struct {
	sc *bufio.Scanner
	n  int
}

// NewExportReader reads r.
func NewExportReader(r io.Reader) *ExportReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	return &ExportReader{sc: sc}
}

// Next returns the next record; io.EOF at the end.
func (e *ExportReader) Next() (ChainRecord, error) {
	for e.sc.Scan() {
		e.n++
		if len(e.sc.Bytes()) == 0 {
			continue
		}
		var c ChainRecord
		if err := json.Unmarshal(e.sc.Bytes(), &c); err != nil {
			return c, fmt.Errorf("export line %d: %w (export with `strata audit export` or GET /v1/audit/export)", e.n, err)
		}
		return c, nil
	}
	if err := e.sc.Err(); err != nil {
		return ChainRecord{}, err
	}
	return ChainRecord{}, io.EOF
}

// VerifyExport checks an org's exported chain (next yields records in seq order, io.EOF
// at the end) against anchors signed by keys, with no database: each record's hash is
// recomputed, each link and the sequence checked, and every anchor of the org must verify
// and match the record at its seq. progress, if not nil, is called with each record's seq.
// Anchors of other orgs are ignored; a signature that does not verify is an error, not a
// break (the anchor file, not the log, is at fault).
func VerifyExport(next func() (ChainRecord, error), anchors []Anchor, keys Keyring, progress func(seq int64)) (OfflineReport, error) {
	var rep OfflineReport
	bySeq := map[int64][]Anchor{}
	broken := func(seq, id int64, reason string) {
		if rep.FirstBroken == nil {
			rep.FirstBroken = &BrokenRef{Seq: seq, ID: id, Reason: reason}
		}
	}
	var prev []byte
	var expect int64 = 1
	first := true
	var mine []Anchor
	for {
		c, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return rep, err
		}
		if first {
			first = false
			rep.OrgID = c.OrgID
			for _, a := range anchors {
				if a.OrgID != c.OrgID {
					continue
				}
				if err := a.Check(keys); err != nil {
					return rep, err
				}
				mine = append(mine, a)
				bySeq[a.Seq] = append(bySeq[a.Seq], a)
			}
		} else if c.OrgID != rep.OrgID {
			return rep, fmt.Errorf("the export mixes orgs %q and %q: export one org at a time", rep.OrgID, c.OrgID)
		}
		rep.Checked++
		ph, err1 := hex.DecodeString(c.PrevHash)
		h, err2 := hex.DecodeString(c.Hash)
		switch {
		case err1 != nil || err2 != nil:
			broken(c.Seq, c.ID, "the record's hashes are not hex")
		case c.Seq != expect:
			broken(expect, 0, fmt.Sprintf("record %d of the chain is missing (deleted)", expect))
		case !hmac.Equal(ph, prev):
			broken(c.Seq, c.ID, "prev_hash does not match the previous record")
		case !hmac.Equal(h, rowHash(prev, c.OrgID, c.Seq, c.row())):
			broken(c.Seq, c.ID, "the record's content does not match its hash (edited)")
		}
		for _, a := range bySeq[c.Seq] {
			if a.HeadHash != c.Hash {
				broken(c.Seq, c.ID, fmt.Sprintf("the record does not match the anchor signed at %s (the chain was rewritten and re-chained)",
					a.At.UTC().Format(time.RFC3339)))
			}
		}
		if progress != nil {
			progress(c.Seq)
		}
		prev, expect, rep.LastSeq = h, c.Seq+1, c.Seq
	}
	if rep.OrgID == "" {
		return rep, fmt.Errorf("the export holds no chained records: nothing to verify")
	}
	sort.Slice(mine, func(i, j int) bool {
		return mine[i].Seq < mine[j].Seq || mine[i].Seq == mine[j].Seq && mine[i].At.Before(mine[j].At)
	})
	rep.Anchors = len(mine)
	if len(mine) > 0 {
		newest := mine[len(mine)-1]
		rep.NewestAnchor = &newest
		if newest.Seq > rep.LastSeq {
			broken(rep.LastSeq+1, 0, fmt.Sprintf("the export ends at record %d but an anchor signed at %s covers records up to %d (records were removed from the end, or the export is incomplete)",
				rep.LastSeq, newest.At.UTC().Format(time.RFC3339), newest.Seq))
		} else {
			rep.Unanchored = rep.LastSeq - newest.Seq
		}
	} else {
		rep.Unanchored = rep.LastSeq
	}
	switch {
	case rep.FirstBroken != nil:
		rep.Status = StatusBroken
	case rep.Unanchored > 0:
		rep.Status = StatusUnanchored
	default:
		rep.Status = StatusIntact
	}
	return rep, nil
}

// AnchorRef is the anchor a server-side verify checked against.
type AnchorRef struct {
	Seq   int64     `json:"seq"`
	At    time.Time `json:"at"`
	KeyID string    `json:"key_id"`
}

// checkAnchors compares org's stored anchors with the chain in tx (after Verify's walk):
// every anchor whose key is known must verify and match the record at its seq. It fills
// rep.Anchor (the newest anchor checked), rep.Unanchored and, on a mismatch, FirstBroken.
func checkAnchors(ctx context.Context, tx pgx.Tx, org string, keys Keyring, rep *Report) error {
	rows, err := tx.Query(ctx, `SELECT a.id, a.org_id, a.seq, encode(a.head_hash, 'hex'), a.at, a.key_id,
			encode(a.signature, 'base64'), coalesce(encode(l.hash, 'hex'), ''), coalesce(l.id, 0)
		FROM audit_anchors a LEFT JOIN audit_log l ON l.org_id = a.org_id AND l.seq = a.seq
		WHERE a.org_id = $1 ORDER BY a.seq, a.id`, org)
	if err != nil {
		return pg.Interpret(err)
	}
	defer rows.Close()
	broken := func(seq, id int64, reason string) {
		if rep.FirstBroken == nil {
			rep.FirstBroken = &BrokenRef{Seq: seq, ID: id, Reason: reason}
		}
	}
	for rows.Next() {
		var a Anchor
		var hash string
		var id int64
		if err := rows.Scan(&a.ID, &a.OrgID, &a.Seq, &a.HeadHash, &a.At, &a.KeyID, &a.Signature, &hash, &id); err != nil {
			return pg.Interpret(err)
		}
		if _, known := keys[a.KeyID]; !known {
			rep.UnverifiableAnchors++
			continue
		}
		if err := a.Check(keys); err != nil {
			broken(a.Seq, 0, err.Error())
			continue
		}
		switch {
		case a.Seq > rep.HeadSeq:
			broken(a.Seq, 0, fmt.Sprintf("an anchor covers records up to %d but the chain ends at %d (records removed)", a.Seq, rep.HeadSeq))
		case a.Seq > 0 && hash != a.HeadHash:
			broken(a.Seq, id, "the record does not match its signed anchor (the chain was rewritten and re-chained)")
		}
		rep.Anchor = &AnchorRef{Seq: a.Seq, At: a.At, KeyID: a.KeyID}
	}
	if err := rows.Err(); err != nil {
		return pg.Interpret(err)
	}
	if rep.Anchor != nil {
		rep.Unanchored = max(rep.HeadSeq-rep.Anchor.Seq, 0)
	} else {
		rep.Unanchored = rep.HeadSeq
	}
	rep.OK = rep.FirstBroken == nil
	return nil
}

// VerifyAnchored is Verify plus a check of the org's stored anchors signed by keys.
func VerifyAnchored(ctx context.Context, tx pgx.Tx, org string, keys Keyring) (Report, error) {
	rep, err := Verify(ctx, tx, org)
	if err != nil {
		return rep, err
	}
	return rep, checkAnchors(ctx, tx, org, keys, &rep)
}
