package episodic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Limits on assets.
const (
	MaxURILen       = 2048
	MaxMediaTypeLen = 255
)

var (
	sha256Re    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	mediaTypeRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(\s*;.*)?$`)
)

// AssetInput is the content of an asset version.
type AssetInput struct {
	URI       string          `json:"uri" minLength:"1" maxLength:"2048" doc:"Where the content lives (s3://, https://, file://, ...)."`
	MediaType string          `json:"media_type,omitempty" maxLength:"255" doc:"MIME type, e.g. video/mp4."`
	SHA256    string          `json:"sha256,omitempty" pattern:"^[0-9a-f]{64}$" doc:"Lowercase hex SHA-256 of the content."`
	Metadata  json.RawMessage `json:"metadata,omitempty" doc:"Free-form JSON object."`
	JobID     string          `json:"job_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"The job whose event produced this version (with seq)."`
	Seq       int64           `json:"seq,omitempty" minimum:"1" doc:"The seq of the event in job_id that produced this version."`
	UserID    string          `json:"user_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject (end user) id."`
	AgentID   string          `json:"agent_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Agent id."`
	SessionID string          `json:"session_id,omitempty" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Session id."`
}

// Asset is an asset at its current version.
type Asset struct {
	AssetID   string          `json:"asset_id"`
	Version   int64           `json:"version" doc:"The current version (also the ETag)."`
	URI       string          `json:"uri"`
	MediaType string          `json:"media_type,omitempty"`
	SHA256    string          `json:"sha256,omitempty"`
	Metadata  json.RawMessage `json:"metadata"`
	JobID     string          `json:"job_id,omitempty" doc:"The job whose event produced the current version."`
	Seq       int64           `json:"seq,omitempty" doc:"That event's seq."`
	UserID    string          `json:"user_id,omitempty"`
	AgentID   string          `json:"agent_id,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// AssetVersion is one version in an asset's lineage.
type AssetVersion struct {
	AssetID       string          `json:"asset_id"`
	Version       int64           `json:"version"`
	ParentVersion int64           `json:"parent_version,omitempty" doc:"The version this one replaced (absent for the first)."`
	URI           string          `json:"uri"`
	MediaType     string          `json:"media_type,omitempty"`
	SHA256        string          `json:"sha256,omitempty"`
	Metadata      json.RawMessage `json:"metadata"`
	JobID         string          `json:"job_id,omitempty"`
	Seq           int64           `json:"seq,omitempty"`
	UserID        string          `json:"user_id,omitempty"`
	AgentID       string          `json:"agent_id,omitempty"`
	SessionID     string          `json:"session_id,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
}

// checkAsset validates in and the event it names (which must exist in the org).
func (s *Store) checkAsset(ctx context.Context, db pg.DBTX, org, asset string, in *AssetInput) error {
	switch {
	case !strata.ValidID(asset):
		return strata.Invalid("asset", "must be 1-%d characters of A-Z a-z 0-9 . _ : -", strata.MaxIDLen)
	case in.URI == "":
		return strata.Invalid("uri", "is required")
	case len(in.URI) > MaxURILen:
		return strata.Invalid("uri", "must be at most %d bytes", MaxURILen)
	case !utf8.ValidString(in.URI) || strings.ContainsFunc(in.URI, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return strata.Invalid("uri", "must be valid UTF-8 without control characters")
	case in.MediaType != "" && (len(in.MediaType) > MaxMediaTypeLen || !mediaTypeRe.MatchString(in.MediaType) ||
		strings.ContainsFunc(in.MediaType, func(r rune) bool { return r < 0x20 || r >= 0x7f })):
		return strata.Invalid("media_type", "must be a media type such as video/mp4")
	case in.SHA256 != "" && !sha256Re.MatchString(in.SHA256):
		return strata.Invalid("sha256", "must be 64 lowercase hex digits")
	}
	for _, f := range []struct{ name, v string }{{"user_id", in.UserID}, {"agent_id", in.AgentID}, {"session_id", in.SessionID}, {"job_id", in.JobID}} {
		if f.v != "" && !strata.ValidID(f.v) {
			return strata.Invalid(f.name, "must be 1-%d characters of A-Z a-z 0-9 . _ : -", strata.MaxIDLen)
		}
	}
	md := bytes.TrimSpace(in.Metadata)
	if isNullOrAbsent(md) {
		md = []byte("{}")
	}
	if md[0] != '{' {
		return strata.Invalid("metadata", "must be a JSON object")
	}
	if _, msg := s.checkJSON(md); msg != "" {
		return strata.Invalid("metadata", "%s", msg)
	}
	in.Metadata = md
	switch {
	case in.JobID == "" && in.Seq != 0:
		return strata.Invalid("job_id", "is required with seq")
	case in.JobID != "" && in.Seq <= 0:
		return strata.Invalid("seq", "is required with job_id (the seq of the event that produced this version)")
	case in.JobID != "":
		if _, err := s.Get(ctx, db, org, in.JobID, in.Seq); errors.Is(err, strata.ErrNotFound) {
			return strata.Invalid("seq", "job %q has no event %d", in.JobID, in.Seq)
		} else if err != nil {
			return err
		}
	}
	return nil
}

const assetCols = `asset_id, version, uri, media_type, sha256, metadata, coalesce(job_id, ''), coalesce(event_seq, 0),
	coalesce(user_id, ''), coalesce(agent_id, ''), coalesce(session_id, ''), created_at, updated_at`

func scanAsset(row pgx.Row) (Asset, error) {
	var a Asset
	var md []byte
	err := row.Scan(&a.AssetID, &a.Version, &a.URI, &a.MediaType, &a.SHA256, &md, &a.JobID, &a.Seq,
		&a.UserID, &a.AgentID, &a.SessionID, &a.CreatedAt, &a.UpdatedAt)
	a.Metadata = json.RawMessage(md)
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	return a, err
}

const versionCols = `asset_id, version, coalesce(parent_version, 0), uri, media_type, sha256, metadata,
	coalesce(job_id, ''), coalesce(event_seq, 0), coalesce(user_id, ''), coalesce(agent_id, ''),
	coalesce(session_id, ''), created_at`

func scanVersion(row pgx.Row) (AssetVersion, error) {
	var v AssetVersion
	var md []byte
	err := row.Scan(&v.AssetID, &v.Version, &v.ParentVersion, &v.URI, &v.MediaType, &v.SHA256, &md,
		&v.JobID, &v.Seq, &v.UserID, &v.AgentID, &v.SessionID, &v.CreatedAt)
	v.Metadata = json.RawMessage(md)
	v.CreatedAt = v.CreatedAt.UTC()
	return v, err
}

// GetAsset returns the asset at its current version. ErrNotFound when it does not exist.
func (s *Store) GetAsset(ctx context.Context, db pg.DBTX, org, asset string) (Asset, error) {
	a, err := scanAsset(db.QueryRow(ctx, `SELECT `+assetCols+` FROM assets WHERE org_id = $1 AND asset_id = $2`, org, asset))
	return a, pg.Interpret(err)
}

// lockAsset returns the asset locked for update, or ErrNotFound.
func lockAsset(ctx context.Context, db pg.DBTX, org, asset string) (Asset, error) {
	a, err := scanAsset(db.QueryRow(ctx, `SELECT `+assetCols+` FROM assets WHERE org_id = $1 AND asset_id = $2 FOR UPDATE`, org, asset))
	return a, pg.Interpret(err)
}

func staleVersion(cur Asset, parent int64) error {
	return strata.Conflict("stale parent version: the asset is at a newer version; re-read it and retry",
		map[string]any{"current_version": cur.Version, "parent_version": parent, "asset": cur})
}

// AddVersion makes a new current version of the asset whose parent is parent (0: the asset
// must not exist yet; it is created at version 1). A parent that is not the current version
// is a conflict (409) carrying the current asset: no lost update. db must be a transaction.
func (s *Store) AddVersion(ctx context.Context, db pg.DBTX, org, asset string, parent int64, in AssetInput) (AssetVersion, error) {
	if err := s.checkAsset(ctx, db, org, asset, &in); err != nil {
		return AssetVersion{}, err
	}
	if parent < 0 {
		return AssetVersion{}, strata.Invalid("parent_version", "must be 0 (new asset) or a version")
	}
	cur, err := lockAsset(ctx, db, org, asset)
	switch {
	case errors.Is(err, strata.ErrNotFound):
		if parent != 0 {
			return AssetVersion{}, strata.ErrNotFound
		}
		return s.create(ctx, db, org, asset, in)
	case err != nil:
		return AssetVersion{}, err
	case cur.Version != parent:
		return AssetVersion{}, staleVersion(cur, parent)
	}
	return s.bump(ctx, db, org, cur, in)
}

// create inserts version 1; a concurrent creator makes it a conflict.
func (s *Store) create(ctx context.Context, db pg.DBTX, org, asset string, in AssetInput) (AssetVersion, error) {
	tag, err := db.Exec(ctx, `INSERT INTO assets (org_id, asset_id, version, uri, media_type, sha256, metadata,
			job_id, event_seq, user_id, agent_id, session_id)
		VALUES ($1, $2, 1, $3, $4, $5, $6, nullif($7, ''), nullif($8, 0), nullif($9, ''), nullif($10, ''), nullif($11, ''))
		ON CONFLICT (org_id, asset_id) DO NOTHING`,
		org, asset, in.URI, in.MediaType, in.SHA256, string(in.Metadata), in.JobID, in.Seq, in.UserID, in.AgentID, in.SessionID)
	if err != nil {
		return AssetVersion{}, pg.Interpret(err)
	}
	if tag.RowsAffected() == 0 {
		cur, err := lockAsset(ctx, db, org, asset)
		if err != nil {
			return AssetVersion{}, err
		}
		return AssetVersion{}, staleVersion(cur, 0)
	}
	return insertVersion(ctx, db, org, asset, 1, 0, in)
}

func (s *Store) bump(ctx context.Context, db pg.DBTX, org string, cur Asset, in AssetInput) (AssetVersion, error) {
	v := cur.Version + 1
	// Scope fields not given keep the asset's.
	if in.UserID == "" {
		in.UserID = cur.UserID
	}
	if in.AgentID == "" {
		in.AgentID = cur.AgentID
	}
	if in.SessionID == "" {
		in.SessionID = cur.SessionID
	}
	_, err := db.Exec(ctx, `UPDATE assets SET version = $3, uri = $4, media_type = $5, sha256 = $6, metadata = $7,
			job_id = nullif($8, ''), event_seq = nullif($9, 0), user_id = nullif($10, ''), agent_id = nullif($11, ''),
			session_id = nullif($12, ''), updated_at = now()
		WHERE org_id = $1 AND asset_id = $2`,
		org, cur.AssetID, v, in.URI, in.MediaType, in.SHA256, string(in.Metadata), in.JobID, in.Seq, in.UserID, in.AgentID, in.SessionID)
	if err != nil {
		return AssetVersion{}, pg.Interpret(err)
	}
	return insertVersion(ctx, db, org, cur.AssetID, v, cur.Version, in)
}

func insertVersion(ctx context.Context, db pg.DBTX, org, asset string, v, parent int64, in AssetInput) (AssetVersion, error) {
	av, err := scanVersion(db.QueryRow(ctx, `INSERT INTO asset_versions (org_id, asset_id, version, parent_version, uri,
			media_type, sha256, metadata, job_id, event_seq, user_id, agent_id, session_id)
		VALUES ($1, $2, $3, nullif($4, 0), $5, $6, $7, $8, nullif($9, ''), nullif($10, 0), nullif($11, ''), nullif($12, ''), nullif($13, ''))
		RETURNING `+versionCols,
		org, asset, v, parent, in.URI, in.MediaType, in.SHA256, string(in.Metadata), in.JobID, in.Seq, in.UserID, in.AgentID, in.SessionID))
	return av, pg.Interpret(err)
}

// PutAsset sets the asset's content: it creates the asset at version 1 (created true), or,
// when the content (uri, media type, sha256, metadata) differs from the current version,
// adds a version whose parent is the current one. Identical content changes nothing (the
// PUT is idempotent). ifMatch, when given, must be the current version (else a conflict).
// db must be a transaction.
func (s *Store) PutAsset(ctx context.Context, db pg.DBTX, org, asset string, in AssetInput, ifMatch *int64) (Asset, bool, error) {
	if err := s.checkAsset(ctx, db, org, asset, &in); err != nil {
		return Asset{}, false, err
	}
	cur, err := lockAsset(ctx, db, org, asset)
	switch {
	case errors.Is(err, strata.ErrNotFound):
		if ifMatch != nil && *ifMatch != 0 {
			return Asset{}, false, strata.ErrNotFound
		}
		if _, err := s.create(ctx, db, org, asset, in); err != nil {
			return Asset{}, false, err
		}
		a, err := s.GetAsset(ctx, db, org, asset)
		return a, true, err
	case err != nil:
		return Asset{}, false, err
	case ifMatch != nil && *ifMatch != cur.Version:
		return Asset{}, false, staleVersion(cur, *ifMatch)
	}
	var same bool
	if err := db.QueryRow(ctx, `SELECT $1::jsonb = $2::jsonb`, string(cur.Metadata), string(in.Metadata)).Scan(&same); err != nil {
		return Asset{}, false, pg.Interpret(err)
	}
	if same && cur.URI == in.URI && cur.MediaType == in.MediaType && cur.SHA256 == in.SHA256 {
		return cur, false, nil
	}
	if _, err := s.bump(ctx, db, org, cur, in); err != nil {
		return Asset{}, false, err
	}
	a, err := s.GetAsset(ctx, db, org, asset)
	return a, false, err
}

// ListVersions returns up to limit versions of the asset after the cursor, oldest first; the
// cursor is a next_cursor of the previous page (a version, as text; "": from the first), and
// another one is a FieldError for "cursor". ErrNotFound when the asset does not exist.
func (s *Store) ListVersions(ctx context.Context, db pg.DBTX, org, asset, after string, limit int) ([]AssetVersion, error) {
	afterVersion := int64(0)
	if after != "" {
		var err error
		afterVersion, err = strconv.ParseInt(after, 10, 64)
		if err != nil || afterVersion < 0 {
			return nil, strata.Invalid("cursor", "must be a next_cursor this API returned")
		}
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM assets WHERE org_id = $1 AND asset_id = $2)`, org, asset).Scan(&exists); err != nil {
		return nil, pg.Interpret(err)
	}
	if !exists {
		return nil, strata.ErrNotFound
	}
	rows, err := db.Query(ctx, `SELECT `+versionCols+` FROM asset_versions
		WHERE org_id = $1 AND asset_id = $2 AND version > $3 ORDER BY version LIMIT $4`, org, asset, afterVersion, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AssetVersion, error) { return scanVersion(r) })
	return out, pg.Interpret(err)
}
