package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Key is an API key's metadata.
type Key struct {
	ID        string     `json:"id"`
	OrgID     string     `json:"org_id"`
	Role      string     `json:"role"`
	Name      string     `json:"name,omitempty"`
	Prefix    string     `json:"prefix"`
	CreatedBy string     `json:"created_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// Secret is the key itself, present only in CreateKey's answer.
	Secret string `json:"key,omitempty"`
}

// CreateKey creates a key for org (empty: the caller's org) with role.
func (c *Client) CreateKey(ctx context.Context, org, role, name string) (Key, error) {
	var k Key
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/admin/keys",
		Body: struct {
			OrgID string `json:"org_id,omitempty"`
			Role  string `json:"role"`
			Name  string `json:"name,omitempty"`
		}{org, role, name}}, &k)
	return k, err
}

// ListKeys lists one page of org's keys.
func (c *Client) ListKeys(ctx context.Context, org, cursor string, limit int) (Page[Key], error) {
	var p Page[Key]
	q := url.Values{}
	if org != "" {
		q.Set("org_id", org)
	}
	setPage(q, cursor, limit)
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/admin/keys", Query: q}, &p)
	return p, err
}

// RevokeKey revokes a key by id.
func (c *Client) RevokeKey(ctx context.Context, id string) (Key, error) {
	var k Key
	_, err := c.Do(ctx, Call{Method: http.MethodDelete, Path: "/v1/admin/keys/" + PathEscape(id)}, &k)
	return k, err
}

// AuditRecord is one audit log entry.
type AuditRecord struct {
	ID         int64          `json:"id"`
	Seq        *int64         `json:"seq,omitempty"`
	At         time.Time      `json:"at"`
	ActorKeyID string         `json:"actor_key_id"`
	ActorRole  string         `json:"actor_role"`
	AgentID    string         `json:"agent_id,omitempty"`
	Action     string         `json:"action"`
	EntityType string         `json:"entity_type"`
	EntityID   string         `json:"entity_id,omitempty"`
	RequestID  string         `json:"request_id,omitempty"`
	Subject    string         `json:"subject,omitempty"`
	Status     int            `json:"status,omitempty"`
	Details    map[string]any `json:"details,omitempty"`
}

// AuditFilter selects audit records.
type AuditFilter struct {
	Action, EntityType, EntityID, ActorKeyID, AgentID, UserID string
	Since, Until                                              time.Time
}

// ListAudit reads one page of the audit log.
func (c *Client) ListAudit(ctx context.Context, f AuditFilter, cursor string, limit int) (Page[AuditRecord], error) {
	q := url.Values{}
	for k, v := range map[string]string{"action": f.Action, "entity_type": f.EntityType, "entity_id": f.EntityID,
		"actor_key_id": f.ActorKeyID, "agent_id": f.AgentID, "user_id": f.UserID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	setPage(q, cursor, limit)
	var p Page[AuditRecord]
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/audit", Query: q}, &p)
	return p, err
}

// AuditReport is the result of verifying the audit chain.
type AuditReport struct {
	OK          bool  `json:"ok"`
	Checked     int64 `json:"checked"`
	Unchained   int64 `json:"unchained"`
	HeadSeq     int64 `json:"head_seq"`
	FirstBroken *struct {
		Seq    int64  `json:"seq"`
		ID     int64  `json:"id,omitempty"`
		Reason string `json:"reason"`
	} `json:"first_broken,omitempty"`
}

// VerifyAudit walks the org's audit chain.
func (c *Client) VerifyAudit(ctx context.Context) (AuditReport, error) {
	var r AuditReport
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/audit/verify"}, &r)
	return r, err
}

func setPage(q url.Values, cursor string, limit int) {
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
}
