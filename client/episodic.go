package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// EventInput is one event to append to a job's log.
type EventInput struct {
	Op     string `json:"op"`
	Params any    `json:"params,omitempty"`
	Result any    `json:"result,omitempty"`
	// IdempotencyKey: appending again with the same key returns the original event.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	AgentID        string `json:"agent_id,omitempty"`
	UserID         string `json:"user_id,omitempty"`
	SessionID      string `json:"session_id,omitempty"`
}

// Event is one stored event.
type Event struct {
	JobID          string          `json:"job_id"`
	Seq            int64           `json:"seq"`
	Op             string          `json:"op"`
	Params         json.RawMessage `json:"params"`
	Result         json.RawMessage `json:"result,omitempty"`
	Fingerprint    string          `json:"fingerprint"`
	AgentID        string          `json:"agent_id,omitempty"`
	UserID         string          `json:"user_id,omitempty"`
	SessionID      string          `json:"session_id,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	RevertsSeq     int64           `json:"reverts_seq,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	Replayed       bool            `json:"replayed,omitempty"`
}

// AppendEvent appends one event. The call is retried with the same Idempotency-Key; set
// in.IdempotencyKey too so that a retry after your own crash is not appended twice.
func (c *Client) AppendEvent(ctx context.Context, job string, in EventInput) (Event, error) {
	var e Event
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "events"), Body: in}, &e)
	return e, err
}

// AppendEvents appends several events in one transaction.
func (c *Client) AppendEvents(ctx context.Context, job string, in []EventInput) ([]Event, error) {
	var p Page[Event]
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "events"), Body: in}, &p)
	return p.Items, err
}

// EventFilter selects events.
type EventFilter struct {
	AfterSeq     int64
	Op           string
	Since, Until time.Time
}

// ListEvents reads one page of a job's log in seq order.
func (c *Client) ListEvents(ctx context.Context, job string, f EventFilter, limit int) (Page[Event], error) {
	q := url.Values{}
	if f.AfterSeq > 0 {
		q.Set("after_seq", strconv.FormatInt(f.AfterSeq, 10))
	}
	if f.Op != "" {
		q.Set("op", f.Op)
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	setPage(q, "", limit)
	var p Page[Event]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "events"), Query: q}, &p)
	return p, err
}

// Applied answers whether an edit was applied.
type Applied struct {
	Applied     bool   `json:"applied"`
	Fingerprint string `json:"fingerprint"`
	Event       *Event `json:"event"`
}

// WasApplied asks whether op with params (any JSON object; nil means {}) is in the job's log
// and not reverted.
func (c *Client) WasApplied(ctx context.Context, job, op string, params any) (Applied, error) {
	q := url.Values{"op": {op}}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return Applied{}, err
		}
		q.Set("params", string(b))
	}
	var a Applied
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "applied"), Query: q}, &a)
	return a, err
}

// WasAppliedFingerprint asks by fingerprint.
func (c *Client) WasAppliedFingerprint(ctx context.Context, job, fingerprint string) (Applied, error) {
	var a Applied
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: jobPath(job, "applied"), Query: url.Values{"fingerprint": {fingerprint}}}, &a)
	return a, err
}

// RevertEvent appends a compensating event for seq.
func (c *Client) RevertEvent(ctx context.Context, job string, seq int64, reason string, sc Scope) (Event, error) {
	body := map[string]any{}
	if reason != "" {
		body["reason"] = reason
	}
	for k, v := range map[string]string{"user_id": sc.UserID, "agent_id": sc.AgentID, "session_id": sc.SessionID} {
		if v != "" {
			body[k] = v
		}
	}
	var e Event
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: jobPath(job, "events", strconv.FormatInt(seq, 10), "revert"), Body: body}, &e)
	return e, err
}

// AssetInput is the content of an asset version.
type AssetInput struct {
	URI       string          `json:"uri"`
	MediaType string          `json:"media_type,omitempty"`
	SHA256    string          `json:"sha256,omitempty"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	JobID     string          `json:"job_id,omitempty"`
	Seq       int64           `json:"seq,omitempty"`
	Scope
}

// Asset is an asset at its current version (AssetVersion: one version of its lineage).
type Asset struct {
	AssetID       string          `json:"asset_id"`
	Version       int64           `json:"version"`
	ParentVersion int64           `json:"parent_version,omitempty"`
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
	UpdatedAt     time.Time       `json:"updated_at,omitempty"`
}

func assetPath(id string, rest ...string) string {
	p := "/v1/assets/" + PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// PutAsset creates an asset or records a new version when its content changed.
func (c *Client) PutAsset(ctx context.Context, id string, in AssetInput, ifMatch *int64) (Asset, error) {
	var a Asset
	_, err := c.Do(ctx, Call{Method: http.MethodPut, Path: assetPath(id), Body: in, Header: ifMatchHeader(ifMatch)}, &a)
	return a, err
}

// GetAsset reads an asset at its current version.
func (c *Client) GetAsset(ctx context.Context, id string) (Asset, error) {
	var a Asset
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: assetPath(id)}, &a)
	return a, err
}

// AddAssetVersion adds a version whose parent is parentVersion (0: the asset must not exist).
func (c *Client) AddAssetVersion(ctx context.Context, id string, parentVersion int64, in AssetInput) (Asset, error) {
	body := struct {
		ParentVersion int64 `json:"parent_version"`
		AssetInput
	}{parentVersion, in}
	var a Asset
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: assetPath(id, "versions"), Body: body}, &a)
	return a, err
}

// ListAssetVersions lists an asset's lineage.
func (c *Client) ListAssetVersions(ctx context.Context, id, cursor string, limit int) (Page[Asset], error) {
	q := url.Values{}
	setPage(q, cursor, limit)
	var p Page[Asset]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: assetPath(id, "versions"), Query: q}, &p)
	return p, err
}
