package audit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRequestEntryNamesTheEntityAndPseudonymisesSubjects(t *testing.T) {
	t.Parallel()
	p := NewPseudonymizer("k")
	e := p.RequestEntry(Request{OrgID: "o", KeyID: "key_1", Role: "agent", AgentID: "a", UserID: "u-7",
		Action: "start-step", Method: "POST", Route: "/v1/jobs/{job}/steps/{step}/start",
		ParamKeys: []string{"job", "step"}, ParamValues: []string{"j1", "cut"}, RequestID: "r1", Status: 200})
	require.Equal(t, "jobs", e.EntityType)
	require.Equal(t, "j1/cut", e.EntityID)
	require.Equal(t, p.Subject("o", "u-7"), e.Subject)
	require.Equal(t, map[string]any{"method": "POST", "route": "/v1/jobs/{job}/steps/{step}/start"}, e.Details)

	// A subject in the path is recorded by pseudonym only, and is the entry's subject.
	e = p.RequestEntry(Request{OrgID: "o", Route: "/v1/gdpr/restrictions/{user}", ParamKeys: []string{"user"},
		ParamValues: []string{"u-9"}, Status: 201})
	require.Equal(t, "gdpr", e.EntityType)
	require.Equal(t, "subject:"+p.Subject("o", "u-9"), e.EntityID)
	require.NotContains(t, e.EntityID, "u-9")
	require.Equal(t, p.Subject("o", "u-9"), e.Subject)

	e = p.RequestEntry(Request{OrgID: "o", Route: "/v1/admin/keys/{id}", ParamKeys: []string{"id"}, ParamValues: []string{"key_2"}})
	require.Equal(t, "admin.keys", e.EntityType)
	require.Equal(t, "key_2", e.EntityID)
}
