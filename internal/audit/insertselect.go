package audit

// InsertSelect is Insert written to ride inside a larger statement, as the body of one of
// its CTEs, so that a write and its audit record are one statement (a memory write:
// semantic.NewMemory.Rider). status is an SQL expression of type int that replaces
// e.Status (the write's answer, 201 or 200, decided by the statement itself). The returned
// function writes the INSERT, adding its parameters with arg; the stored row is Insert's.
func InsertSelect(e Entry, status string) (func(arg func(any) string) string, error) {
	d, err := e.details()
	if err != nil {
		return nil, err
	}
	return func(arg func(any) string) string {
		return `INSERT INTO audit_log (org_id, actor_key_id, actor_role, agent_id, action, entity_type,
			entity_id, request_id, subject, status, details)
		SELECT ` + arg(e.OrgID) + `::text, ` + arg(e.ActorKeyID) + `::text, ` + arg(e.ActorRole) + `::text, nullif(` +
			arg(e.AgentID) + `::text, ''), ` + arg(e.Action) + `::text, ` + arg(e.EntityType) + `::text, nullif(` +
			arg(e.EntityID) + `::text, ''), nullif(` + arg(e.RequestID) + `::text, ''), nullif(` + arg(e.Subject) +
			`::text, ''), nullif(` + status + `, 0), ` + arg(d) + `::jsonb`
	}, nil
}
