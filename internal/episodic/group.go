package episodic

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// GroupItem is one append that joins a group commit (AppendGroup): several requests'
// appends, to any jobs of one org, written by one statement in one transaction.
type GroupItem struct {
	Job string
	ps  []prepared
	// Out holds the item's events as stored, in input order, once AppendGroup returned.
	Out []Event
}

// Events is the number of events in the item.
func (it *GroupItem) Events() int { return len(it.ps) }

// NewGroupItem validates an append for AppendGroup. ok is false when it cannot join a
// group — the job id or an event is invalid (Append reports why), or an event carries an
// idempotency key (Append must look the keys up in the log first) — and the caller appends
// it on its own with Append.
func (s *Store) NewGroupItem(job string, in []EventInput) (it *GroupItem, ok bool) {
	if strata.CheckID("job", job, false) != nil {
		return nil, false
	}
	ps, err := s.prepareAll(in)
	if err != nil {
		return nil, false
	}
	for _, p := range ps {
		if p.key != "" {
			return nil, false
		}
	}
	return &GroupItem{Job: job, ps: ps}, true
}

// groupInsertSQL is insertSQL for many jobs at once: it bumps each job's counter by the
// number of events the group appends to it (creating the job on first append; the jobs
// come sorted, so two groups lock counter rows in the same order and cannot deadlock on
// them) and inserts every event at its seq: last_seq - count + position in the job.
const groupInsertSQL = `WITH n AS (
	SELECT * FROM unnest($2::text[], $3::bigint[]) AS n(job, cnt)),
head AS (
	INSERT INTO episodic_jobs AS j (org_id, job_id, last_seq)
	SELECT $1, n.job, n.cnt FROM n ORDER BY n.job
	ON CONFLICT (org_id, job_id) DO UPDATE SET last_seq = j.last_seq + excluded.last_seq
	RETURNING j.job_id, j.last_seq)
INSERT INTO episodic_events (org_id, job_id, seq, op, params, result, fingerprint, agent_id, user_id, session_id)
SELECT $1, u.job, head.last_seq - n.cnt + u.pos, u.op, u.params::jsonb, u.result::jsonb, u.fp, nullif(u.agent, ''),
	nullif(u.usr, ''), nullif(u.sess, '')
FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::bytea[], $10::text[], $11::text[],
	$12::text[]) AS u(job, pos, op, params, result, fp, agent, usr, sess)
JOIN n ON n.job = u.job JOIN head ON head.job_id = u.job
RETURNING job_id, seq, created_at`

// AppendGroup appends every item's events in db's transaction with one statement. Within
// a job, the items' events get consecutive seqs in item order (and input order within an
// item), as if the items had been appended one after the other; seqs stay gap-free per
// job. On error the transaction must be rolled back.
func AppendGroup(ctx context.Context, db pg.DBTX, org string, items []*GroupItem) error {
	if one := oneEvent(items); one != nil {
		return pg.Interpret(one.scanOne(db.QueryRow(ctx, insertOneSQL, oneArgs(org, one.Job, one.ps[0])...)))
	}
	args, total := groupArgs(org, items)
	rows, err := db.Query(ctx, groupInsertSQL, args...)
	if err != nil {
		return pg.Interpret(err)
	}
	defer rows.Close()
	return pg.Interpret(fillGroup(rows, items, total))
}

// QueueAppendGroup is AppendGroup as a statement queued in b, for a caller that sends it in
// a pipeline of its own; the items' Out are filled in when b's results are read.
func QueueAppendGroup(b *pgx.Batch, org string, items []*GroupItem) {
	if one := oneEvent(items); one != nil {
		b.Queue(insertOneSQL, oneArgs(org, one.Job, one.ps[0])...).QueryRow(one.scanOne)
		return
	}
	args, total := groupArgs(org, items)
	b.Queue(groupInsertSQL, args...).Query(func(rows pgx.Rows) error { return fillGroup(rows, items, total) })
}

// oneEvent is the group's only item when it holds a single event (a group of one request,
// the usual case below saturation), which insertOneSQL writes with plain parameters: the
// same counter bump and insert, bound without nine one-element arrays.
func oneEvent(items []*GroupItem) *GroupItem {
	if len(items) == 1 && len(items[0].ps) == 1 {
		return items[0]
	}
	return nil
}

// scanOne reads insertOneSQL's row into the item's Out.
func (it *GroupItem) scanOne(row pgx.Row) error {
	it.Out = make([]Event, 1)
	if err := scanOneRow(row, it.Job, it.ps[0], &it.Out[0]); err != nil {
		it.Out = nil
		return err
	}
	return nil
}

// groupArgs are groupInsertSQL's arguments for items, and the number of events. A group is
// small (often one item of one event): the distinct jobs are a sorted slice rather than a
// map, and the columns share two backing arrays (the text columns one, the bigint columns
// another), so the allocations do not grow with the number of columns.
func groupArgs(org string, items []*GroupItem) ([]any, int) {
	total := 0
	for _, it := range items {
		total += len(it.ps)
	}
	nj := len(items) // at most this many distinct jobs
	str := make([]string, nj+6*total)
	col := func(i int) []string { return str[nj+i*total : nj+i*total : nj+(i+1)*total] }
	jobs := str[:0:nj]
	for _, it := range items {
		jobs = append(jobs, it.Job)
	}
	slices.Sort(jobs)
	jobs = slices.Compact(jobs)
	ints := make([]int64, 2*len(jobs)+total)
	cnts, pos, epos := ints[:len(jobs)], ints[len(jobs):2*len(jobs)], ints[2*len(jobs):2*len(jobs):len(ints)]
	for _, it := range items {
		j, _ := slices.BinarySearch(jobs, it.Job)
		cnts[j] += int64(len(it.ps))
	}
	ejob, ops, params, agents, users, sessions := col(0), col(1), col(2), col(3), col(4), col(5)
	results, fps := make([]*string, 0, total), make([][]byte, 0, total)
	for _, it := range items {
		j, _ := slices.BinarySearch(jobs, it.Job)
		for _, p := range it.ps {
			pos[j]++
			ejob, epos = append(ejob, it.Job), append(epos, pos[j])
			ops, params, fps = append(ops, p.op), append(params, string(p.params)), append(fps, p.fp)
			var r *string
			if p.result != nil {
				s := string(p.result)
				r = &s
			}
			results = append(results, r)
			agents, users, sessions = append(agents, p.agent), append(users, p.user), append(sessions, p.session)
		}
	}
	return []any{org, jobs, cnts, ejob, epos, ops, params, results, fps, agents, users, sessions}, total
}

// fillGroup reads the group insert's rows into the items' Out.
func fillGroup(rows pgx.Rows, items []*GroupItem, total int) error {
	type key struct {
		job string
		seq int64
	}
	first := map[string]int64{} // each job's first new seq
	ats := make(map[key]time.Time, total)
	for rows.Next() {
		var k key
		var at time.Time
		if err := rows.Scan(&k.job, &k.seq, &at); err != nil {
			return err
		}
		if f, ok := first[k.job]; !ok || k.seq < f {
			first[k.job] = k.seq
		}
		ats[k] = at.UTC()
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ats) != total {
		return fmt.Errorf("episodic: group inserted %d of %d events", len(ats), total)
	}
	pos := map[string]int64{}
	for _, it := range items {
		it.Out = make([]Event, len(it.ps))
		for i, p := range it.ps {
			seq := first[it.Job] + pos[it.Job]
			pos[it.Job]++
			it.Out[i] = Event{JobID: it.Job, Seq: seq, Op: p.op, Params: json.RawMessage(p.params),
				Fingerprint: hex.EncodeToString(p.fp), AgentID: p.agent, UserID: p.user, SessionID: p.session,
				CreatedAt: ats[key{it.Job, seq}]}
			if p.result != nil {
				it.Out[i].Result = json.RawMessage(p.result)
			}
		}
	}
	return nil
}
