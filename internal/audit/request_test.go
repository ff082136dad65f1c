package audit

import (
	"encoding/json"
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

// The request records' details are written without encoding/json, byte for byte as it
// would write them; anything it would escape, and any other value, goes through it.
func TestDetailsAreEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, d := range []map[string]any{
		nil, {},
		{"method": "POST", "route": "/v1/jobs/{job}/events"},
		{"via": "mcp", "route": "/v1/sessions/{session}/state", "method": "GET"},
		{"z": "1", "a": "2", "m": "3", "b": ""},
		{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"},
		{"route": "/v1/a<b>&c"}, {"q": `say "hi"`}, {"q": `back\slash`}, {"q": "tab\there"}, {"q": "é"},
		{"count": 3}, {"ok": true}, {"ids": []string{"a"}},
	} {
		v := d
		if v == nil {
			v = map[string]any{} // details() writes {} for none
		}
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, err := Entry{Details: d}.details()
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%v", d)
	}
	_, ok := plainDetails(map[string]any{"q": "a&b"})
	require.False(t, ok)
	_, ok = plainDetails(map[string]any{"method": "POST", "route": "/v1/x"})
	require.True(t, ok)
}
