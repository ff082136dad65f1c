package api

import (
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/policy"
)

// PolicyDoc is an org's lifecycle policy as GET/PUT /v1/admin/policies answer it.
type PolicyDoc struct {
	OrgID     string                 `json:"org_id"`
	Version   int64                  `json:"version" doc:"0 while the org runs on the defaults; also the ETag."`
	UpdatedAt *time.Time             `json:"updated_at,omitempty"`
	UpdatedBy string                 `json:"updated_by,omitempty" doc:"The API key that wrote it."`
	Policy    policy.LifecyclePolicy `json:"policy" doc:"The effective policy: what the org set, every absent field filled from the defaults."`
	Stored    policy.LifecyclePolicy `json:"stored" doc:"What the org set (absent fields follow the defaults, also when the defaults change)."`
	Defaults  policy.LifecyclePolicy `json:"defaults" doc:"The server's defaults."`
}

type PolicyOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   PolicyDoc
}

type PutPolicyInput struct {
	IfMatch string `header:"If-Match" doc:"The version you read (ETag; \"0\" when none was stored); a stale one gets 409."`
	Body    policy.LifecyclePolicy
}

var OpGetPolicies = huma.Operation{
	OperationID: "get-policies", Method: http.MethodGet, Path: "/v1/admin/policies", Tags: []string{"admin"},
	Summary: "Read the org's memory lifecycle policy",
	Description: "Eviction rules per memory kind (max_age, max_inactivity, max_items_per_scope, delete_superseded_after, " +
		"verify_age), working-state session_ttl, episodic completed_job_retention, checkpoints keep_versions, key-value " +
		"history_retention, and consolidation settings (compaction, merge threshold, promotion score). Durations are " +
		"Go durations or whole days (\"90d\"); \"0\" turns a rule off. Pinned memories are exempt from every rule.",
}

var OpPutPolicies = huma.Operation{
	OperationID: "put-policies", Method: http.MethodPut, Path: "/v1/admin/policies", Tags: []string{"admin"},
	Summary: "Replace the org's memory lifecycle policy",
	Description: "Replaces the stored policy (absent fields follow the server defaults). Validated as a whole: a bad " +
		"field is a 422 naming it and nothing is stored. If-Match makes it conditional. The periodic eviction job and " +
		"POST /v1/admin/eviction/run apply it; search's staleness flag follows memories.kinds.fact.verify_age (or the default's).",
}
