package jobs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/strata"
)

// requireField asserts err is a FieldError for the bare field name (no "body."/"query."
// location: the transport adds it) of the given kind.
func requireField(t *testing.T, err error, field string, kind strata.FieldKind) {
	t.Helper()
	var fe *strata.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, field, fe.Field, "%v", err)
	require.Equal(t, kind, fe.Kind, "%v", err)
}

// The checks that run before any read (the HTTP layer runs them before it reads the
// episodic log's head) name bare fields.
func TestInputChecksNameBareFields(t *testing.T) {
	t.Parallel()
	nulJSON := json.RawMessage(`{"a":"\u0000"}`)
	for _, c := range []struct {
		name  string
		err   error
		field string
	}{
		{"goal", jobs.JobSpec{Goal: "a\x00"}.Check(), "goal"},
		{"metadata NUL", jobs.JobSpec{Metadata: nulJSON}.Check(), "metadata"},
		{"metadata array", jobs.JobSpec{Metadata: json.RawMessage(`[1]`)}.Check(), "metadata"},
		{"outcome", jobs.JobSpec{Outcome: nulJSON}.Check(), "outcome"},
		{"status", jobs.JobSpec{Status: "paused"}.Check(), "status"},
		{"completion outcome", jobs.CheckCompletion("", nulJSON), "outcome"},
		{"completion status", jobs.CheckCompletion(jobs.StatusRunning, nil), "status"},
		{"checkpoint goal", jobs.CheckpointInput{Goal: "\x00"}.Check(), "goal"},
		{"checkpoint current_step", jobs.CheckpointInput{CurrentStep: "\x00"}.Check(), "current_step"},
		{"checkpoint next_action", jobs.CheckpointInput{NextAction: "\x00"}.Check(), "next_action"},
		{"checkpoint done", jobs.CheckpointInput{Done: nulJSON}.Check(), "done"},
		{"checkpoint pending", jobs.CheckpointInput{Pending: nulJSON}.Check(), "pending"},
		{"checkpoint state NUL", jobs.CheckpointInput{State: nulJSON}.Check(), "state"},
		{"checkpoint state array", jobs.CheckpointInput{State: json.RawMessage(`[]`)}.Check(), "state"},
		{"checkpoint working_state", jobs.CheckpointInput{WorkingState: nulJSON}.Check(), "working_state"},
		{"langgraph ns", jobs.LangGraphPut{CheckpointNS: "\x00"}.Check(), "checkpoint_ns"},
		{"langgraph id", jobs.LangGraphPut{CheckpointID: "\x00"}.Check(), "checkpoint_id"},
		{"langgraph parent", jobs.LangGraphPut{ParentCheckpointID: "\x00"}.Check(), "parent_checkpoint_id"},
	} {
		t.Run(c.name, func(t *testing.T) { requireField(t, c.err, c.field, strata.FieldInvalid) })
	}
	require.NoError(t, jobs.JobSpec{Goal: "ok", Metadata: json.RawMessage(`{"a":"\\u0000"}`), Status: jobs.StatusFailed}.Check(),
		`an escaped backslash before u0000 is text, not NUL`)
	require.NoError(t, jobs.CheckCompletion("", json.RawMessage(`{"ok":true}`)))
	require.NoError(t, jobs.CheckpointInput{State: json.RawMessage(`{}`), Done: json.RawMessage(`[1]`)}.Check())
}

// Every write and list checks its own input (also without the HTTP layer in front): bad
// input is a FieldError with a bare name, and nothing is written.
func TestStoreMethodsCheckTheirInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "j", jobs.JobSpec{Goal: "g"})
	nulJSON := json.RawMessage(`{"a":"\u0000"}`)
	in := func(f func(tx pgx.Tx) error) error { return e.tx("acme", f) }

	requireField(t, in(func(tx pgx.Tx) error {
		_, _, err := e.store.PutJob(ctx, tx, "acme", "new", jobs.JobSpec{Goal: "a\x00b"}, nil)
		return err
	}), "goal", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.CompleteJob(ctx, tx, "acme", "j", "", nulJSON, 0)
		return err
	}), "outcome", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.PutCheckpoint(ctx, tx, "acme", "j", jobs.CheckpointInput{State: json.RawMessage(`"s"`)}, nil)
		return err
	}), "state", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.PutCheckpoint(ctx, tx, "acme", "j", jobs.CheckpointInput{Done: json.RawMessage(`{}`)}, nil)
		return err
	}), "done", strata.FieldInvalid)
	for _, c := range []struct {
		in    jobs.StepInput
		field string
	}{
		{jobs.StepInput{Params: nulJSON}, "input.params"},
		{jobs.StepInput{Tool: "t\x00"}, "input.tool"},
		{jobs.StepInput{Model: "m\x00"}, "input.model"},
	} {
		requireField(t, in(func(tx pgx.Tx) error {
			_, err := e.store.Start(ctx, tx, "acme", "j", "s", jobs.StartInput{Owner: "a", Input: c.in})
			return err
		}), c.field, strata.FieldInvalid)
	}
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.Start(ctx, tx, "acme", "j", "s", jobs.StartInput{Owner: "a", LeaseSeconds: -1})
		return err
	}), "lease_seconds", strata.FieldInvalid)
	c, err := e.start("acme", "j", "s", "a", 30)
	require.NoError(t, err)
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.Heartbeat(ctx, tx, "acme", "j", "s", c.FencingToken, 1<<30)
		return err
	}), "lease_seconds", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.Complete(ctx, tx, "acme", "j", "s", c.FencingToken, nulJSON)
		return err
	}), "result", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.Fail(ctx, tx, "acme", "j", "s", c.FencingToken, "a\x00", jobs.DispositionRetryable)
		return err
	}), "error", strata.FieldInvalid)
	st, err := e.complete("acme", "j", "s", c.FencingToken, `{"ok":1}`)
	require.NoError(t, err, "the refused writes left the step as it was")
	require.JSONEq(t, `{"ok":1}`, string(st.Result))

	requireField(t, in(func(tx pgx.Tx) error {
		_, _, err := e.store.CreateHandoff(ctx, tx, "acme", "j", jobs.HandoffInput{From: "a", To: "b", Context: nulJSON})
		return err
	}), "context", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, _, err := e.store.CreateHandoff(ctx, tx, "acme", "j", jobs.HandoffInput{From: "a", To: "b", Context: json.RawMessage(`[1]`)})
		return err
	}), "context", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, _, err := e.store.CreateHandoff(ctx, tx, "acme", "j", jobs.HandoffInput{From: "a", To: "a"})
		return err
	}), "to", strata.FieldInvalid)

	requireField(t, in(func(tx pgx.Tx) error {
		_, _, err := e.store.Fork(ctx, tx, "acme", "j", 0, jobs.ForkInput{NewJobID: "f"})
		return err
	}), "version", strata.FieldInvalid)
	requireField(t, in(func(tx pgx.Tx) error {
		_, _, err := e.store.Fork(ctx, tx, "acme", "j", 7, jobs.ForkInput{NewJobID: "f"})
		return err
	}), "version", strata.FieldNotFound)

	var j jobs.Job
	require.NoError(t, in(func(tx pgx.Tx) (err error) { j, err = e.store.GetJob(ctx, tx, "acme", "j"); return err }))
	require.Equal(t, jobs.StatusRunning, j.Status)
	require.Zero(t, j.CheckpointVersion)
}

// Lists parse their own cursors: a cursor the list did not make is a FieldError for
// "cursor", checked before the job's existence.
func TestListsCheckTheirCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.job("acme", "j", jobs.JobSpec{Goal: "g"})
	in := func(f func(tx pgx.Tx) error) error { return e.tx("acme", f) }
	for name, list := range map[string]func(tx pgx.Tx) error{
		"jobs": func(tx pgx.Tx) error {
			_, err := e.store.ListJobs(ctx, tx, "acme", jobs.ListFilter{After: "no spaces"})
			return err
		},
		"steps": func(tx pgx.Tx) error {
			_, err := e.store.PageSteps(ctx, tx, "acme", "missing", "no spaces", 10)
			return err
		},
		"handoffs": func(tx pgx.Tx) error {
			_, err := e.store.ListHandoffs(ctx, tx, "acme", "missing", "", "no spaces", 10)
			return err
		},
		"checkpoints": func(tx pgx.Tx) error {
			_, err := e.store.ListCheckpoints(ctx, tx, "acme", "missing", "-1", false, 10)
			return err
		},
		"langgraph": func(tx pgx.Tx) error {
			_, err := e.store.LangGraphList(ctx, tx, "acme", jobs.LangGraphListFilter{Cursor: "!!", Limit: 10})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) { requireField(t, in(list), "cursor", strata.FieldInvalid) })
	}

	// PageSteps: a job that does not exist is not found (ListSteps: an empty list).
	err := in(func(tx pgx.Tx) error { _, err := e.store.PageSteps(ctx, tx, "acme", "missing", "", 10); return err })
	require.ErrorIs(t, err, strata.ErrNotFound)
	require.NoError(t, in(func(tx pgx.Tx) error {
		steps, err := e.store.ListSteps(ctx, tx, "acme", "missing", "", 10)
		require.Empty(t, steps)
		return err
	}))
	require.NoError(t, in(func(tx pgx.Tx) error {
		cps, err := e.store.ListCheckpoints(ctx, tx, "acme", "j", "0", true, 10)
		require.Empty(t, cps)
		return err
	}))
}

// LangGraph: the list's filter and cursor, and the writes' ids, are checked by the tier.
func TestLangGraphChecksItsInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	in := func(f func(tx pgx.Tx) error) error { return e.tx("acme", f) }
	put := func(id, meta string) {
		t.Helper()
		require.NoError(t, in(func(tx pgx.Tx) error {
			_, err := e.store.LangGraphPut(ctx, tx, "acme", "thread", jobs.LangGraphPut{CheckpointID: id,
				Checkpoint: json.RawMessage(`{"v":4,"id":"` + id + `"}`), Metadata: json.RawMessage(meta)})
			return err
		}))
	}
	put("c1", `{"source":"input"}`)
	put("c2", `{"source":"loop"}`)
	put("c3", `{"source":"loop"}`)

	list := func(f jobs.LangGraphListFilter) ([]jobs.LangGraphTuple, error) {
		var out []jobs.LangGraphTuple
		err := in(func(tx pgx.Tx) (err error) { out, err = e.store.LangGraphList(ctx, tx, "acme", f); return err })
		return out, err
	}
	for _, filter := range []string{`{`, `[1]`, `{"a":"\u0000"}`} {
		_, err := list(jobs.LangGraphListFilter{Filter: filter, Limit: 10})
		requireField(t, err, "filter", strata.FieldInvalid)
	}
	// A page and its cursor: the cursor continues after the page's last tuple.
	page, err := list(jobs.LangGraphListFilter{Filter: `{"source":"loop"}`, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "c3", page[0].CheckpointID)
	rest, err := list(jobs.LangGraphListFilter{Filter: `{"source":"loop"}`, Cursor: page[0].Cursor(), Limit: 10})
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Equal(t, "c2", rest[0].CheckpointID)

	for _, c := range []struct {
		w     jobs.LangGraphWrites
		field string
	}{
		{jobs.LangGraphWrites{CheckpointNS: "\x00", CheckpointID: "c1", TaskID: "t"}, "checkpoint_ns"},
		{jobs.LangGraphWrites{CheckpointID: "c\x00", TaskID: "t"}, "checkpoint_id"},
		{jobs.LangGraphWrites{CheckpointID: "c1", TaskID: "t\x00"}, "task_id"},
		{jobs.LangGraphWrites{CheckpointID: "c1", TaskID: "t", TaskPath: "\x00"}, "task_path"},
		{jobs.LangGraphWrites{TaskID: "t"}, "checkpoint_id"},
		{jobs.LangGraphWrites{CheckpointID: "c1"}, "task_id"},
	} {
		requireField(t, in(func(tx pgx.Tx) error {
			_, _, err := e.store.LangGraphPutWrites(ctx, tx, "acme", "thread", c.w)
			return err
		}), c.field, strata.FieldInvalid)
	}
	requireField(t, in(func(tx pgx.Tx) error {
		_, err := e.store.LangGraphPut(ctx, tx, "acme", "thread", jobs.LangGraphPut{CheckpointID: "c9",
			Checkpoint: json.RawMessage(`{}`), Blobs: []jobs.LangGraphBlob{{Channel: "a", Version: "1", Type: "empty", Data: []byte("x")}}})
		return err
	}), "blobs[0].data", strata.FieldInvalid)
}
