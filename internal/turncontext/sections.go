package turncontext

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/strata-mem/strata/internal/episodic"
	"github.com/strata-mem/strata/internal/jobs"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/summaries"
)

// The sections' rendering: each tier's answer becomes a section's header and candidate
// items, in priority order, for Pack.

// compact renders JSON on one line, cut to maxItemChars.
func compact(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return Truncate(string(raw), maxItemChars)
	}
	return Truncate(b.String(), maxItemChars)
}

// jobSection renders the job's section from its resume (resErr: Resume's error,
// strata.ErrNotFound when there is no such job) and its newest events and log head.
func jobSection(jobID string, r jobs.Resume, resErr error, last episodic.LastResult, nEvents int) (
	Section, *Job, json.RawMessage, int64, error) {
	sec := Section{Name: SectionJob}
	if errors.Is(resErr, strata.ErrNotFound) {
		sec.Note = "no job " + jobID + " in this org yet (create it with PUT /v1/jobs/" + jobID + ")"
		return sec, nil, nil, 0, nil
	}
	if resErr != nil {
		return sec, nil, nil, 0, resErr
	}
	if last.Err != nil {
		return sec, nil, nil, 0, last.Err
	}
	var evs []episodic.Event
	if nEvents > 0 {
		evs = last.Events
	}
	// The view's seqs are gap-free, so the newest event's seq is the log's head.
	lastSeq := last.Head.LastSeq
	if len(last.Events) > 0 {
		lastSeq = last.Events[len(last.Events)-1].Seq
	}
	j := r.Job
	cj := &Job{JobID: j.JobID, Status: j.Status, NextAction: r.NextAction, CheckpointVersion: j.CheckpointVersion,
		LastEventSeq: lastSeq, CompletedSteps: len(r.CompletedSteps), InFlight: len(r.InFlight)}
	var h strings.Builder
	fmt.Fprintf(&h, "## Job %s (%s)", j.JobID, j.Status)
	if j.Goal != "" {
		fmt.Fprintf(&h, "\nGoal: %s", Truncate(j.Goal, 2000))
	}
	if r.Checkpoint != nil && r.Checkpoint.CurrentStep != "" {
		cj.CurrentStep = r.Checkpoint.CurrentStep
	} else if len(r.InFlight) > 0 {
		cj.CurrentStep = r.InFlight[0].StepID
	}
	if cj.CurrentStep != "" {
		fmt.Fprintf(&h, "\nCurrent step: %s", cj.CurrentStep)
	}
	switch {
	case j.Status != "running":
		// The last checkpoint's next action was written while the job ran ("job done:
		// complete it"); read on a finished job it would ask for what is done.
		fmt.Fprintf(&h, "\nNext action: none, the job is %s.", j.Status)
	case r.NextAction != "":
		fmt.Fprintf(&h, "\nNext action: %s", Truncate(r.NextAction, 2000))
	}
	fmt.Fprintf(&h, "\nProgress: %d steps done, %d in flight, %d failed; checkpoint v%d; last event #%d.",
		len(r.CompletedSteps), len(r.InFlight), len(r.FailedSteps), j.CheckpointVersion, lastSeq)
	if j.Status == "running" {
		h.WriteString("\nSteps marked done are finished: never run them again (start_step answers their stored result).")
	} else {
		h.WriteString("\nThis job is finished: it takes no more steps (fork it from a checkpoint to continue).")
	}
	sec.Header = h.String()

	for _, f := range r.InFlight {
		sec.Items = append(sec.Items, Item{ID: "in_flight:" + f.StepID, Order: 0, Text: fmt.Sprintf(
			"- In flight: %s, held by %s (lease %s until %s, fencing token %d, attempt %d)",
			f.StepID, f.Owner, f.Lease, f.LeaseExpiresAt.UTC().Format(time.RFC3339), f.FencingToken, f.Attempts)})
	}
	for _, f := range r.FailedSteps {
		sec.Items = append(sec.Items, Item{ID: "failed:" + f.StepID, Order: 1, Text: fmt.Sprintf(
			"- Failed: %s (%s): %s", f.StepID, f.Disposition, Truncate(f.Error, maxItemChars))})
	}
	for _, ho := range r.PendingHandoffs {
		line := fmt.Sprintf("- Pending handoff %s: %s → %s (the job stays with %s until %s acknowledges)", ho.ID, ho.From, ho.To, ho.From, ho.To)
		if c := compact(ho.Context); c != "" && c != "{}" {
			line += "; context: " + c
		}
		sec.Items = append(sec.Items, Item{ID: "handoff:" + ho.ID, Order: 2, Text: line})
	}
	if r.Checkpoint != nil {
		if p := compact(r.Checkpoint.Pending); p != "" && p != "[]" {
			sec.Items = append(sec.Items, Item{ID: "pending", Order: 3, Text: "- Pending: " + p})
		}
		if s := compact(r.Checkpoint.State); s != "" && s != "{}" {
			sec.Items = append(sec.Items, Item{ID: "checkpoint_state", Order: 4, Text: "- Task state: " + s})
		}
	}
	// Completed steps: chosen newest first, shown in completion order.
	n := len(r.CompletedSteps)
	for i := n - 1; i >= 0; i-- {
		c := r.CompletedSteps[i]
		line := "- Done: " + c.StepID
		if res := compact(c.Result); res != "" {
			line += " → " + res
		}
		sec.Items = append(sec.Items, Item{ID: "done:" + c.StepID, Order: 10 + i, Text: line})
	}
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		line := fmt.Sprintf("- Event #%d %s", e.Seq, e.Op)
		if p := compact(e.Params); p != "" && p != "{}" {
			line += " " + p
		}
		if res := compact(e.Result); res != "" {
			line += " → " + res
		}
		sec.Items = append(sec.Items, Item{ID: "event:" + strconv.FormatInt(e.Seq, 10), Order: 10 + n + i, Text: line})
	}
	var snap json.RawMessage
	var snapV int64
	if r.Checkpoint != nil {
		snap, snapV = r.WorkingState, r.Checkpoint.Version
	}
	return sec, cj, snap, snapV, nil
}

// workingSection renders the working-state section: the session's state document and
// newest turns, or else the checkpoint's snapshot. db is where the working tier reads the
// durable copy when Redis lost the session (redisOnly: not at all).
func workingSection(ctx context.Context, ws WorkingStore, db pg.DBTX, org, session string, nTurns int,
	snapshot json.RawMessage, snapshotVersion int64) (Section, error) {
	sec := Section{Name: SectionWorking}
	var doc json.RawMessage
	if session != "" {
		state, err := ws.Get(ctx, db, org, session)
		switch {
		case errors.Is(err, strata.ErrNotFound):
			sec.Note = "session " + session + " has no state yet"
		case err != nil:
			return sec, err
		default:
			doc = state.State
			sec.Header = fmt.Sprintf("## Working state (session %s, version %d)", session, state.Version)
		}
		if nTurns > 0 && doc != nil {
			buf, err := ws.Turns(ctx, db, org, session)
			if err != nil && !errors.Is(err, strata.ErrNotFound) {
				return sec, err
			}
			ts := buf.Turns
			if len(ts) > nTurns {
				ts = ts[len(ts)-nTurns:]
			}
			for i := len(ts) - 1; i >= 0; i-- {
				t := ts[i]
				sec.Items = append(sec.Items, Item{ID: "turn:" + strconv.FormatInt(t.Seq, 10), Order: 1_000_000 + i,
					Text: fmt.Sprintf("- [%s] %s", t.Role, Truncate(t.Content, 2*maxItemChars))})
			}
		}
	}
	if doc == nil && len(bytes.TrimSpace(snapshot)) > 0 && string(bytes.TrimSpace(snapshot)) != "null" {
		doc = snapshot
		sec.Header = fmt.Sprintf("## Working state (snapshot from checkpoint v%d)", snapshotVersion)
		sec.Note = ""
	}
	if doc == nil {
		if sec.Note == "" {
			sec.Note = "no session_id given and no checkpoint snapshot"
		}
		return sec, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(doc, &obj) != nil {
		sec.Items = append([]Item{{ID: "state", Text: "- " + compact(doc)}}, sec.Items...)
		return sec, nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	stateItems := make([]Item, 0, len(keys))
	for i, k := range keys {
		stateItems = append(stateItems, Item{ID: "state." + k, Order: i, Text: "- " + k + ": " + compact(obj[k])})
	}
	sec.Items = append(stateItems, sec.Items...)
	return sec, nil
}

// preferencesSection renders the preferences section from each namespace's resolved entries
// (read by QueueList in the first round trip).
func preferencesSection(nss []string, lists []keyvalue.ListResult) (Section, error) {
	sec := Section{Name: SectionPreferences,
		Header: "## Preferences that apply (resolved: session > agent > user > org)"}
	for i, ns := range nss {
		if lists[i].Err != nil {
			return sec, lists[i].Err
		}
		es := lists[i].Entries
		if len(es) > maxKVKeysPerNS {
			es = es[:maxKVKeysPerNS]
		}
		for _, e := range es {
			sec.Items = append(sec.Items, Item{ID: ns + "/" + e.Key, Order: len(sec.Items),
				Text: fmt.Sprintf("- %s/%s = %s (%s)", ns, e.Key, compact(e.Value), e.Level)})
		}
	}
	if len(sec.Items) == 0 {
		sec.Note = "no keys in " + strings.Join(nss, ", ") + " for this scope"
	}
	return sec, nil
}

func compactAny(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return Truncate(string(b), maxItemChars)
}

// summarySection renders the rolling summaries (docs/summaries.md) of the job's older log
// and the session's spilled turns, read in the first round trip: one item per line, the
// job's first, so a tight budget keeps their beginnings.
func summarySection(jobID, session string, job, sess summaries.LatestResult) (Section, error) {
	sec := Section{Name: SectionSummary}
	for _, r := range []summaries.LatestResult{job, sess} {
		if r.Err != nil {
			return sec, r.Err
		}
	}
	var h []string
	add := func(prefix string, s summaries.Summary) {
		for _, line := range strings.Split(s.Text, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				sec.Items = append(sec.Items, Item{ID: fmt.Sprintf("%s:%d:%d", prefix, s.Version, len(sec.Items)),
					Order: len(sec.Items), Text: Truncate(line, 8*maxItemChars)})
			}
		}
	}
	if job.Found {
		s := job.Summary
		h = append(h, fmt.Sprintf("Job %s events #%d-#%d (summary v%d)", jobID, s.FromSeq, s.ToSeq, s.Version))
		add("job_summary", s)
	}
	if sess.Found {
		s := sess.Summary
		h = append(h, fmt.Sprintf("session %s turns %d-%d (summary v%d)", session, s.FromSeq, s.ToSeq, s.Version))
		add("session_summary", s)
	}
	if len(sec.Items) == 0 {
		switch {
		case jobID == "" && session == "":
			sec.Note = "no job_id or session_id given"
		default:
			sec.Note = "nothing summarised yet (the turn buffer has not spilled, or the job's log is short)"
		}
		return sec, nil
	}
	sec.Header = "## Summary of what came before (" + strings.Join(h, "; ") + ")"
	return sec, nil
}
