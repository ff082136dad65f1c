package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/groupcommit"
	"github.com/strata-mem/strata/internal/idempotency"
	"github.com/strata-mem/strata/internal/testenv"
)

// member makes an append of one event to job, answered with its seq.
func member(t *testing.T, events *episodic.Store, org, job, key string) *groupcommit.Member {
	t.Helper()
	item, ok := events.NewGroupItem(job, []episodic.EventInput{{Op: "render"}})
	require.True(t, ok)
	m := &groupcommit.Member{Item: item, Deadline: time.Now().Add(10 * time.Second),
		Audit: audit.Entry{OrgID: org, ActorKeyID: "k", ActorRole: "agent", Action: "append-events", EntityType: "job", EntityID: job, Status: 201},
		Response: func(it *episodic.GroupItem) (idempotency.Completion, error) {
			return idempotency.Completion{Status: 201, Body: []byte(strconv.FormatInt(it.Out[0].Seq, 10))}, nil
		}}
	if key != "" {
		m.Claim = &idempotency.Claimant{Key: key, Method: "POST", Path: "/v1/jobs/" + job + "/events", Hash: []byte(key)}
	}
	return m
}

// Concurrent members of one org are all written, each at its own gap-free seq with its
// audit record, and the histogram counts every member once; a member whose key already
// has a record is sent back untouched.
func TestCommitterWritesEveryMemberOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.Pool(t)
	owner := testenv.OwnerConn(t, dsn)
	events := episodic.NewStore(episodic.Options{})
	reg := prometheus.NewPedanticRegistry()
	g := groupcommit.New(pool, 10*time.Second, time.Hour, reg)
	const org, n = "gc-org", 40

	seqs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := ""
			if i%2 == 1 {
				key = fmt.Sprintf("key-%d", i)
			}
			m := member(t, events, org, fmt.Sprintf("job-%d", i%3), key)
			g.Submit(ctx, org, m)
			if m.Err != nil {
				seqs[i] = "err: " + m.Err.Error()
				return
			}
			seqs[i] = string(m.Body)
		})
	}
	wg.Wait()
	perJob := map[string]map[string]bool{}
	for i, s := range seqs {
		job := fmt.Sprintf("job-%d", i%3)
		if perJob[job] == nil {
			perJob[job] = map[string]bool{}
		}
		require.NotContains(t, s, "err", "member %d", i)
		require.False(t, perJob[job][s], "seq %s of %s given twice", s, job)
		perJob[job][s] = true
	}
	for job, got := range perJob {
		for seq := 1; seq <= len(got); seq++ {
			require.True(t, got[strconv.Itoa(seq)], "%s lacks seq %d", job, seq)
		}
	}
	var stored, audits, keys int
	require.NoError(t, owner.QueryRow(ctx, `SELECT (SELECT count(*) FROM episodic_events WHERE org_id = $1),
		(SELECT count(*) FROM audit_log WHERE org_id = $1 AND action = 'append-events'),
		(SELECT count(*) FROM idempotency_keys WHERE org_id = $1 AND response_status = 201)`, org).Scan(&stored, &audits, &keys))
	require.Equal(t, n, stored)
	require.Equal(t, n, audits)
	require.Equal(t, n/2, keys)

	// A key with a record: back to the single-request path, nothing written.
	m := member(t, events, org, "job-0", "key-1")
	g.Submit(ctx, org, m)
	require.True(t, errors.Is(m.Err, groupcommit.ErrFallback), "%v", m.Err)
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM episodic_events WHERE org_id = $1`, org).Scan(&stored))
	require.Equal(t, n, stored)

	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			switch f.GetName() {
			case "strata_group_commit_size":
				got["members"] = mt.GetHistogram().GetSampleSum()
			case "strata_group_commit_fallbacks_total":
				got[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, float64(n+1), got["members"])
	require.Equal(t, 1.0, got["key_exists"])
}
