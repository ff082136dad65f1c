package api

import (
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/audit"
)

type ListAuditInput struct {
	Action     string    `query:"action" maxLength:"200" doc:"Operation id, e.g. create-key."`
	EntityType string    `query:"entity_type" maxLength:"200"`
	EntityID   string    `query:"entity_id" maxLength:"1000"`
	ActorKeyID string    `query:"actor_key_id" maxLength:"200"`
	AgentID    string    `query:"agent_id" maxLength:"200"`
	UserID     string    `query:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject; matched through its pseudonym."`
	Subject    string    `query:"subject" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Data subject by its audit pseudonym (as erasures and exports name it), e.g. after the user id was erased. Ignored with user_id."`
	Since      time.Time `query:"since" doc:"RFC 3339; inclusive."`
	Until      time.Time `query:"until" doc:"RFC 3339; exclusive."`
	Order      string    `query:"order" enum:"oldest,newest" doc:"oldest (default): oldest first; newest: newest first (the cursor pages on towards older records)."`
	Page
}

type ListAuditOutput struct {
	Body List[audit.Record]
}

type VerifyAuditOutput struct {
	Body audit.Report
}

var OpListAudit = huma.Operation{
	OperationID: "list-audit", Method: http.MethodGet, Path: "/v1/audit", Tags: []string{"compliance"},
	Summary: "Read the audit log",
	Description: "Every write and compliance action of the caller's org, oldest first (order=newest: newest first). Data subjects appear only " +
		"as keyed pseudonyms; filter by user_id to find a subject's records.",
}

var OpVerifyAudit = huma.Operation{
	OperationID: "verify-audit", Method: http.MethodGet, Path: "/v1/audit/verify", Tags: []string{"compliance"},
	Summary: "Verify the audit log's hash chain",
	Description: "Chains any pending records, then walks the org's chain recomputing every hash. " +
		"first_broken names the first record that was edited or removed. Every stored anchor signed by a known key " +
		"is checked too (a chain rewritten and re-chained no longer matches its anchors); anchor names the newest one " +
		"checked and unanchored_records counts the records newer than it.",
}

type AnchorAuditOutput struct {
	Body audit.Anchor
}

var OpAnchorAudit = huma.Operation{
	OperationID: "anchor-audit", Method: http.MethodPost, Path: "/v1/audit/anchors", Tags: []string{"compliance"},
	Summary: "Sign the audit chain's head now", DefaultStatus: http.StatusCreated,
	Description: "Chains any pending records, then signs the head of the org's chain (org, last seq, head hash, time, " +
		"key id) with the server's Ed25519 key, stores the anchor and appends it to STRATA_AUDIT_ANCHOR_FILE. " +
		"Anchors are also made every STRATA_AUDIT_ANCHOR_INTERVAL for chains that grew.",
}

type ListAnchorsInput struct {
	Page
}

type ListAnchorsOutput struct {
	Body List[audit.Anchor]
}

var OpListAnchors = huma.Operation{
	OperationID: "list-audit-anchors", Method: http.MethodGet, Path: "/v1/audit/anchors", Tags: []string{"compliance"},
	Summary: "List the signed anchors of the audit chain",
	Description: "The org's anchors, newest first. Copies kept outside Strata (STRATA_AUDIT_ANCHOR_FILE) are what an " +
		"outside check trusts: `strata audit verify --anchors FILE --public-key K`.",
}

type ExportAuditOutput struct {
	Body List[audit.ChainRecord]
}

var OpExportAudit = huma.Operation{
	OperationID: "export-audit", Method: http.MethodGet, Path: "/v1/audit/export", Tags: []string{"compliance"},
	Summary: "Export the audit chain for an outside check",
	Description: "The org's chained records in seq order, each exactly as its hash covers it (details as the hashed " +
		"text). `strata audit export` writes these items as JSON lines; `strata audit verify` checks them against " +
		"anchors without database access.",
}
