package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/summaries"
	"github.com/strata-mem/strata/internal/working"
)

var OpListSessions = huma.Operation{
	OperationID: "list-sessions", Method: http.MethodGet, Path: "/v1/sessions", Tags: []string{"working"},
	Summary: "List sessions (a user's, newest first, cursor)",
	Description: "The org's live sessions — with user_id, that user's — newest first by creation, each with its scope, " +
		"turn count, state version and times. Sessions of a restricted subject (GDPR Art. 18) are left out.",
}

type ListSessionsInput struct {
	UserID string `query:"user_id" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Only this data subject's sessions."`
	Page
}

type ListSessionsOutput struct {
	Body List[working.SessionSummary]
}

func (o *ListSessionsOutput) ItemSubjects() (users, jobs []string) {
	for _, s := range o.Body.Items {
		users = append(users, s.UserID)
	}
	return users, nil
}

func (o *ListSessionsOutput) DropItems(drop func(int) bool) { o.Body.DropItems(drop) }

var OpSessionSummary = huma.Operation{
	OperationID: "get-session-summary", Method: http.MethodGet, Path: "/v1/sessions/{session}/summary", Tags: []string{"working"},
	Summary: "A session's rolling summary (latest version)",
	Description: "What fell out of the session's turn buffer, summarised by a background job (the org's LLM when the server " +
		"has one, extractively otherwise): the text, the seqs it covers (from_seq..to_seq), its token count and who " +
		"wrote it. 404 until the buffer first spilled far enough to be summarised. /v1/context includes it as its summary section.",
}

var OpSessionSummaryVersions = huma.Operation{
	OperationID: "list-session-summary-versions", Method: http.MethodGet, Path: "/v1/sessions/{session}/summary/versions", Tags: []string{"working"},
	Summary:     "A session's summary history (every version, newest first)",
	Description: "Each new summary of the session is a new version; cursor is the version to page below.",
}

var OpJobSummary = huma.Operation{
	OperationID: "get-job-summary", Method: http.MethodGet, Path: "/v1/jobs/{job}/summary", Tags: []string{"episodic"},
	Summary: "A long job's log summary (latest version)",
	Description: "The events older than the newest ones (STRATA_SUMMARY_KEEP_EVENTS) summarised by a background job, with " +
		"the seqs it covers and its token count; /v1/context includes it, so a long job's context stays in budget. " +
		"404 until the log is long enough.",
}

var OpJobSummaryVersions = huma.Operation{
	OperationID: "list-job-summary-versions", Method: http.MethodGet, Path: "/v1/jobs/{job}/summary/versions", Tags: []string{"episodic"},
	Summary: "A job's log summary history (every version, newest first)",
}

type SummaryOutput struct {
	ETag string `header:"ETag"`
	Body summaries.Summary
}

func (o *SummaryOutput) SubjectUsers() []string { return []string{o.Body.UserID} }

type SessionSummaryVersionsInput struct {
	SessionPath
	Page
}

type JobSummaryVersionsInput struct {
	JobPath
	Page
}

type SummaryVersionsOutput struct {
	Body List[summaries.Summary]
}

func (o *SummaryVersionsOutput) SubjectUsers() []string {
	var u []string
	for _, s := range o.Body.Items {
		u = append(u, s.UserID)
	}
	return u
}
