package episodic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/testenv"
)

// AppendGroup writes items to several jobs in one statement: per job the items' events
// follow the log's head in item order, gap-free, and Out is what List reads back.
func TestAppendGroup(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	ctx := context.Background()
	appendOne(t, pool, st, "acme", "b", episodic.EventInput{Op: "before"}) // b's head is 1

	ev := func(op string, i int) episodic.EventInput {
		return episodic.EventInput{Op: op, Params: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), AgentID: "ag",
			Result: json.RawMessage(`{"ok":true}`)}
	}
	var items []*episodic.GroupItem
	for i, job := range []string{"b", "a", "b", "c", "a"} {
		it, ok := st.NewGroupItem(job, []episodic.EventInput{ev("x", i), ev("y", i)})
		require.True(t, ok)
		require.Equal(t, 2, it.Events())
		items = append(items, it)
	}
	require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
		return episodic.AppendGroup(ctx, tx, "acme", items)
	}))
	want := map[string][]int64{"b": {2, 3, 4, 5}, "a": {1, 2, 3, 4}, "c": {1, 2}}
	got := map[string][]int64{}
	for _, it := range items {
		for _, e := range it.Out {
			got[it.Job] = append(got[it.Job], e.Seq)
		}
	}
	require.Equal(t, want, got)
	for _, job := range []string{"a", "b", "c"} {
		stored, err := inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) {
			return st.List(ctx, tx, "acme", job, episodic.ListQuery{Limit: 100})
		})
		require.NoError(t, err)
		var outs []episodic.Event
		for _, it := range items {
			if it.Job == job {
				outs = append(outs, it.Out...)
			}
		}
		if job == "b" {
			stored = stored[1:]
		}
		require.Len(t, stored, len(outs))
		for i := range outs {
			require.Equal(t, stored[i].Seq, outs[i].Seq)
			require.Equal(t, stored[i].Fingerprint, outs[i].Fingerprint)
			require.Equal(t, stored[i].CreatedAt, outs[i].CreatedAt)
			require.JSONEq(t, string(stored[i].Params), string(outs[i].Params))
			require.JSONEq(t, string(stored[i].Result), string(outs[i].Result))
		}
	}

	// What cannot join a group: invalid events, bad job ids, per-event keys.
	_, ok := st.NewGroupItem("j", []episodic.EventInput{{Op: ""}})
	require.False(t, ok)
	_, ok = st.NewGroupItem("bad/job", []episodic.EventInput{{Op: "x"}})
	require.False(t, ok)
	_, ok = st.NewGroupItem("j", []episodic.EventInput{{Op: "x", IdempotencyKey: "k"}})
	require.False(t, ok)

	// Another org's group cannot write into acme (RLS binds the transaction's org).
	it, _ := st.NewGroupItem("a", []episodic.EventInput{{Op: "intruder"}})
	err := pg.InOrgTx(ctx, pool, "globex", func(tx pgx.Tx) error { return episodic.AppendGroup(ctx, tx, "acme", []*episodic.GroupItem{it}) })
	require.Error(t, err)
}

// A group of one event (the usual group below saturation) is written by the single-event
// statement, directly and queued in a batch: its Out is what List reads back, field by field.
func TestAppendGroupOfOneEvent(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.Pool(t)
	st := episodic.NewStore(episodic.Options{})
	ctx := context.Background()
	appendOne(t, pool, st, "acme", "one", episodic.EventInput{Op: "before"})
	var outs []episodic.Event
	for i, queued := range []bool{false, true} {
		it, ok := st.NewGroupItem("one", []episodic.EventInput{{Op: "crop", Params: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			AgentID: "ag", UserID: "u", SessionID: "s", Result: json.RawMessage(`{"ok":true}`)}})
		require.True(t, ok)
		require.NoError(t, pg.InOrgTx(ctx, pool, "acme", func(tx pgx.Tx) error {
			if !queued {
				return episodic.AppendGroup(ctx, tx, "acme", []*episodic.GroupItem{it})
			}
			b := &pgx.Batch{}
			episodic.QueueAppendGroup(b, "acme", []*episodic.GroupItem{it})
			return tx.SendBatch(ctx, b).Close()
		}))
		require.Len(t, it.Out, 1)
		outs = append(outs, it.Out[0])
	}
	stored, err := inTx(t, pool, "acme", func(tx pgx.Tx) ([]episodic.Event, error) {
		return st.List(ctx, tx, "acme", "one", episodic.ListQuery{Limit: 100})
	})
	require.NoError(t, err)
	require.Len(t, stored, 3)
	for i, out := range outs {
		require.Equal(t, int64(i+2), out.Seq)
		require.JSONEq(t, string(stored[i+1].Params), string(out.Params))
		require.JSONEq(t, string(stored[i+1].Result), string(out.Result))
		stored[i+1].Params, stored[i+1].Result, out.Params, out.Result = nil, nil, nil, nil
		require.Equal(t, stored[i+1], out)
	}
}
