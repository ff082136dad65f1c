package client

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// PolicyDoc is an org's memory lifecycle policy (GET/PUT /v1/admin/policies). The
// policy documents stay JSON: docs/workers.md describes their fields.
type PolicyDoc struct {
	OrgID     string          `json:"org_id"`
	Version   int64           `json:"version"`
	UpdatedAt *time.Time      `json:"updated_at,omitempty"`
	UpdatedBy string          `json:"updated_by,omitempty"`
	Policy    json.RawMessage `json:"policy"`
	Stored    json.RawMessage `json:"stored"`
	Defaults  json.RawMessage `json:"defaults"`
}

// GetPolicies reads the caller's org policy (admin key).
func (c *Client) GetPolicies(ctx context.Context) (PolicyDoc, error) {
	var p PolicyDoc
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/admin/policies"}, &p)
	return p, err
}

// PutPolicies replaces the org's policy with policy (a JSON object; absent fields follow
// the defaults). ifMatch ≥ 0 makes it conditional on that version.
func (c *Client) PutPolicies(ctx context.Context, policy json.RawMessage, ifMatch int64) (PolicyDoc, error) {
	var p PolicyDoc
	call := Call{Method: http.MethodPut, Path: "/v1/admin/policies", Body: policy}
	if ifMatch >= 0 {
		call.Header = http.Header{"If-Match": {strconv.Quote(strconv.FormatInt(ifMatch, 10))}}
	}
	_, err := c.Do(ctx, call, &p)
	return p, err
}

// EvictionItem is what one policy rule removes.
type EvictionItem struct {
	Tier      string   `json:"tier"`
	Reason    string   `json:"reason"`
	Kind      string   `json:"kind,omitempty"`
	Policy    string   `json:"policy"`
	Count     int      `json:"count"`
	SampleIDs []string `json:"sample_ids"`
	More      bool     `json:"more"`
}

// EvictionReport is the answer of eviction preview and run.
type EvictionReport struct {
	OrgID             string         `json:"org_id"`
	At                time.Time      `json:"at"`
	Applied           bool           `json:"applied"`
	PolicyVersion     int64          `json:"policy_version"`
	Total             int            `json:"total"`
	Items             []EvictionItem `json:"items"`
	NeedsVerification int            `json:"needs_verification"`
}

// PreviewEviction reports what a run would remove now, changing nothing.
func (c *Client) PreviewEviction(ctx context.Context) (EvictionReport, error) {
	var r EvictionReport
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/admin/eviction/preview"}, &r)
	return r, err
}

// RunEviction applies the policy now.
func (c *Client) RunEviction(ctx context.Context) (EvictionReport, error) {
	var r EvictionReport
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/admin/eviction/run"}, &r)
	return r, err
}

// ConsolidationReport is the answer of a consolidation run.
type ConsolidationReport struct {
	OrgID         string    `json:"org_id"`
	At            time.Time `json:"at"`
	PolicyVersion int64     `json:"policy_version"`
	Tasks         []string  `json:"tasks"`
	JobSummaries  struct {
		Written, Exists, Skipped, Failed int
		Items                            []json.RawMessage `json:"items"`
	} `json:"job_summaries"`
	Compaction struct {
		Jobs, Runs, Events int
		JobIDs             []string `json:"job_ids"`
	} `json:"compaction"`
	Merge struct {
		Clusters, Superseded int
		Items                []json.RawMessage `json:"items"`
	} `json:"merge"`
	Promotion struct {
		Evaluated, Promoted, Superseded int
		Items                           []json.RawMessage `json:"items"`
	} `json:"promotion"`
}

// RunConsolidation consolidates now; tasks empty means all (job_summaries, compaction,
// merge, promotion).
func (c *Client) RunConsolidation(ctx context.Context, tasks []string) (ConsolidationReport, error) {
	var r ConsolidationReport
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/admin/consolidation/run",
		Body: struct {
			Tasks []string `json:"tasks,omitempty"`
		}{tasks}}, &r)
	return r, err
}
