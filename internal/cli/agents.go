package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/progress"
)

// Agent-facing commands: sessions, jobs, memories, kv, context, tools.

func addScope(cmd *cobra.Command, sc *client.Scope) {
	cmd.Flags().StringVar(&sc.UserID, "user", "", "data subject (end user) id")
	cmd.Flags().StringVar(&sc.AgentID, "agent", "", "agent id")
	cmd.Flags().StringVar(&sc.SessionID, "session", "", "session id")
}

// jsonArg parses a JSON argument; a bare word that is not JSON is taken as a string.
func jsonArg(name, s string) (json.RawMessage, error) {
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "@") {
		b, err := os.ReadFile(s[1:])
		if err != nil {
			return nil, fmt.Errorf("%s: reading %s: %w", name, s[1:], err)
		}
		s = string(b)
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s), nil
	}
	b, _ := json.Marshal(s)
	return b, nil
}

func oneLine(raw json.RawMessage, max int) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// newBar is a progress bar on stderr for table output: redrawn in place on a terminal,
// plain lines in a pipe or a log, nothing for JSON output (so that stdout and stderr stay
// machine-readable).
func (a *app) newBar(total int64, what string) *progress.Bar {
	return progress.New(a.errOut, total, what, progress.Options{Hidden: a.output == "json", ShowCount: true, ClearOnFinish: true})
}

// completeJobs offers the org's job ids for shell completion.
func (a *app) completeJobs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := a.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	p, err := c.ListJobs(cmd.Context(), client.JobFilter{}, "", 200)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ids := make([]string, 0, len(p.Items))
	for _, j := range p.Items {
		ids = append(ids, j.JobID+"\t"+j.Status+" "+j.Goal)
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) jobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "Durable jobs: list, resume, steps, events, checkpoints, fork"}

	var status string
	var stalled bool
	list := &cobra.Command{Use: "list", Short: "List jobs (--stalled: running jobs that stopped making progress)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var all []client.Job
			cursor := ""
			for {
				p, err := c.ListJobs(cmd.Context(), client.JobFilter{Status: status, Stalled: stalled}, cursor, 1000)
				if err != nil {
					return err
				}
				all = append(all, p.Items...)
				if cursor = p.NextCursor; cursor == "" {
					break
				}
			}
			rows := [][]string{}
			for _, j := range all {
				where := ""
				if j.Stalled != nil {
					where = j.Stalled.Reason + " " + j.Stalled.StepID + " (" + j.Stalled.StalledFor + ")"
				}
				rows = append(rows, []string{j.JobID, j.Status, j.Owner, strconv.FormatInt(j.CheckpointVersion, 10), ts(j.ProgressAt), where})
			}
			return a.print(all, []string{"JOB", "STATUS", "OWNER", "CHECKPOINT", "PROGRESS_AT", "STALLED"}, rows)
		}}
	list.Flags().StringVar(&status, "status", "", "running, completed, failed or cancelled")
	list.Flags().BoolVar(&stalled, "stalled", false, "only stalled running jobs")
	_ = list.RegisterFlagCompletionFunc("status", cobra.FixedCompletions([]string{"running", "completed", "failed", "cancelled"}, cobra.ShellCompDirectiveNoFileComp))

	var spec client.JobSpec
	var metadata string
	create := &cobra.Command{Use: "create JOB", Short: "Create a job (or update its goal/metadata)", Args: cobra.ExactArgs(1),
		Example: "  strata jobs create promo-7 --goal 'Spring promo for three channels' --owner editor --user u1",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if spec.Metadata, err = jsonArg("--metadata", metadata); err != nil {
				return err
			}
			j, _, err := c.PutJob(cmd.Context(), args[0], spec, nil)
			if err != nil {
				return err
			}
			return a.print(j, []string{"JOB", "STATUS", "OWNER", "VERSION"}, [][]string{{j.JobID, j.Status, j.Owner, strconv.FormatInt(j.Version, 10)}})
		}}
	create.Flags().StringVar(&spec.Goal, "goal", "", "what the job is for")
	create.Flags().StringVar(&spec.Owner, "owner", "", "owning agent")
	create.Flags().StringVar(&metadata, "metadata", "", "JSON object (or @file)")
	addScope(create, &spec.Scope)

	var events int
	resume := &cobra.Command{Use: "resume JOB", Short: "Everything an agent needs to carry on: checkpoint, steps done, in flight, failed, handoffs",
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.ResumeJob(cmd.Context(), args[0], events)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.print(r, nil, nil)
			}
			j := r.Job
			fmt.Fprintf(a.out, "Job %s (%s), owner %s, checkpoint v%d, last event #%d\n", j.JobID, j.Status, j.Owner, j.CheckpointVersion, r.LastEventSeq)
			if j.Goal != "" {
				fmt.Fprintf(a.out, "Goal: %s\n", j.Goal)
			}
			if r.Checkpoint != nil && r.Checkpoint.CurrentStep != "" {
				fmt.Fprintf(a.out, "Current step: %s\n", r.Checkpoint.CurrentStep)
			}
			switch {
			case j.Status != "running":
				// The last checkpoint's next action was written while the job ran; a finished
				// job takes no more steps.
				fmt.Fprintf(a.out, "Next action: none, the job is %s (fork it from a checkpoint to continue)\n", j.Status)
			case r.NextAction != "":
				fmt.Fprintf(a.out, "Next action: %s\n", r.NextAction)
			}
			rows := [][]string{}
			for _, s := range r.CompletedSteps {
				rows = append(rows, []string{s.StepID, "done", strconv.FormatInt(s.FencingToken, 10), strconv.Itoa(s.Attempts), oneLine(s.Result, 60)})
			}
			for _, s := range r.InFlight {
				rows = append(rows, []string{s.StepID, "in flight (" + s.Lease + ", " + s.Owner + ")", strconv.FormatInt(s.FencingToken, 10), strconv.Itoa(s.Attempts), "until " + ts(s.LeaseExpiresAt)})
			}
			for _, s := range r.FailedSteps {
				rows = append(rows, []string{s.StepID, "failed/" + s.Disposition, strconv.FormatInt(s.FencingToken, 10), strconv.Itoa(s.Attempts), s.Error})
			}
			fmt.Fprintln(a.out)
			if err := a.print(nil, []string{"STEP", "STATE", "TOKEN", "ATTEMPTS", "RESULT"}, rows); err != nil {
				return err
			}
			for _, h := range r.PendingHandoffs {
				fmt.Fprintf(a.out, "\nPending handoff %s: %s → %s (sent %d×)\n", h.ID, h.From, h.To, h.SentCount)
			}
			return nil
		}}
	resume.Flags().IntVar(&events, "events", 0, "include the last N events (JSON output)")

	var after int64
	var op string
	var limit int
	var all bool
	evCmd := &cobra.Command{Use: "events JOB", Short: "Read a job's event log (--all pages through it with a progress bar)",
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var evs []client.Event
			var bar *progress.Bar
			if all {
				r, err := c.ResumeJob(cmd.Context(), args[0], 0)
				if err != nil {
					return err
				}
				bar = a.newBar(r.LastEventSeq-after, "reading events")
			}
			cursor := after
			for {
				n := limit
				if all {
					n = 1000
				}
				p, err := c.ListEvents(cmd.Context(), args[0], client.EventFilter{AfterSeq: cursor, Op: op}, n)
				if err != nil {
					return err
				}
				evs = append(evs, p.Items...)
				if len(p.Items) > 0 {
					if bar != nil {
						bar.Add(p.Items[len(p.Items)-1].Seq - cursor)
					}
					cursor = p.Items[len(p.Items)-1].Seq
				}
				if !all || p.NextCursor == "" {
					break
				}
			}
			if bar != nil {
				bar.Finish()
			}
			rows := [][]string{}
			for _, e := range evs {
				rows = append(rows, []string{strconv.FormatInt(e.Seq, 10), ts(e.CreatedAt), e.Op, oneLine(e.Params, 50), oneLine(e.Result, 40), e.AgentID})
			}
			return a.print(evs, []string{"SEQ", "AT", "OP", "PARAMS", "RESULT", "AGENT"}, rows)
		}}
	evCmd.Flags().Int64Var(&after, "after-seq", 0, "only events after this seq")
	evCmd.Flags().StringVar(&op, "op", "", "only this op")
	evCmd.Flags().IntVar(&limit, "limit", 100, "events to show (max 1000)")
	evCmd.Flags().BoolVar(&all, "all", false, "read the whole log")

	steps := &cobra.Command{Use: "steps JOB", Short: "List a job's steps with their leases and results",
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var all []client.Step
			cursor := ""
			for {
				p, err := c.ListSteps(cmd.Context(), args[0], cursor, 1000)
				if err != nil {
					return err
				}
				all = append(all, p.Items...)
				if cursor = p.NextCursor; cursor == "" {
					break
				}
			}
			rows := [][]string{}
			for _, s := range all {
				state := s.Status
				if s.Lease != "" {
					state += " (" + s.Lease + ")"
				}
				if s.Disposition != "" {
					state += "/" + s.Disposition
				}
				rows = append(rows, []string{s.StepID, state, s.Owner, strconv.FormatInt(s.FencingToken, 10), strconv.Itoa(s.Attempts), oneLine(s.Result, 50)})
			}
			return a.print(all, []string{"STEP", "STATE", "OWNER", "TOKEN", "ATTEMPTS", "RESULT"}, rows)
		}}

	checkpoints := &cobra.Command{Use: "checkpoints JOB", Short: "List a job's checkpoint versions (time travel)",
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.ListCheckpoints(cmd.Context(), args[0], false, "", 1000)
			if err != nil {
				return err
			}
			rows := [][]string{}
			for _, cp := range p.Items {
				rows = append(rows, []string{strconv.FormatInt(cp.Version, 10), cp.StoredIn, cp.CurrentStep, cp.NextAction, strconv.FormatInt(cp.EventSeq, 10), ts(cp.CreatedAt)})
			}
			return a.print(p, []string{"VERSION", "STORED_IN", "CURRENT_STEP", "NEXT_ACTION", "EVENT_SEQ", "AT"}, rows)
		}}

	var fromVersion int64
	var newJob, owner string
	fork := &cobra.Command{Use: "fork JOB", Short: "Fork a job from one of its checkpoint versions (branch, time travel)",
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeJobs,
		Example: "  strata jobs fork promo-7 --version 3 --new-job promo-7-alt",
		RunE: func(cmd *cobra.Command, args []string) error {
			if newJob == "" || fromVersion < 1 {
				return errors.New("--new-job and --version are required (see `strata jobs checkpoints " + args[0] + "` for versions)")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			f, err := c.ForkJob(cmd.Context(), args[0], fromVersion, newJob, owner)
			if err != nil {
				return err
			}
			return a.print(f, []string{"JOB", "PARENT", "AT_VERSION", "NEXT_ACTION"},
				[][]string{{f.Job.JobID, f.Job.ParentJobID, strconv.FormatInt(f.Job.ParentVersion, 10), f.Checkpoint.NextAction}})
		}}
	fork.Flags().Int64Var(&fromVersion, "version", 0, "checkpoint version to fork from")
	fork.Flags().StringVar(&newJob, "new-job", "", "id of the new job")
	fork.Flags().StringVar(&owner, "owner", "", "owner of the fork (default: the parent's)")

	var outcome, finalStatus string
	complete := &cobra.Command{Use: "complete JOB", Short: "Finish a job (completed, failed or cancelled)",
		Args: cobra.ExactArgs(1), ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			o, err := jsonArg("--outcome", outcome)
			if err != nil {
				return err
			}
			var ov any
			if o != nil {
				ov = o
			}
			j, err := c.CompleteJob(cmd.Context(), args[0], finalStatus, ov)
			if err != nil {
				return err
			}
			return a.print(j, []string{"JOB", "STATUS", "FINISHED_AT"}, [][]string{{j.JobID, j.Status, ts(*j.FinishedAt)}})
		}}
	complete.Flags().StringVar(&outcome, "outcome", "", "what came of it (JSON or text)")
	complete.Flags().StringVar(&finalStatus, "status", "completed", "completed, failed or cancelled")

	cmd.AddCommand(list, create, resume, evCmd, steps, checkpoints, fork, complete)
	return cmd
}

func (a *app) sessionsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "sessions", Short: "Working memory: a session's state document and turns"}
	show := func(st client.SessionState) error {
		return a.print(st, []string{"SESSION", "VERSION", "EXPIRES_AT", "RESTORED", "STATE"},
			[][]string{{st.SessionID, strconv.FormatInt(st.Version, 10), ts(st.ExpiresAt), strconv.FormatBool(st.Restored), oneLine(st.State, 80)}})
	}
	get := &cobra.Command{Use: "get SESSION", Short: "Read a session's state document", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			st, err := c.GetState(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return show(st)
		}}
	var w client.SessionWrite
	var patch bool
	set := &cobra.Command{Use: "set SESSION STATE_JSON", Short: "Replace (or --patch: merge-patch) a session's state document",
		Args: cobra.ExactArgs(2), Example: "  strata sessions set s1 '{\"draft\": 2}' --user u1\n  strata sessions set s1 '{\"tone\": null}' --patch",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			doc, err := jsonArg("STATE_JSON", args[1])
			if err != nil {
				return err
			}
			var st client.SessionState
			if patch {
				st, err = c.PatchState(cmd.Context(), args[0], doc, w, nil)
			} else {
				st, err = c.PutState(cmd.Context(), args[0], doc, w, nil)
			}
			if err != nil {
				return err
			}
			return show(st)
		}}
	set.Flags().StringVar(&w.UserID, "user", "", "data subject (set on the session's first write)")
	set.Flags().StringVar(&w.AgentID, "agent", "", "agent id (set on the session's first write)")
	set.Flags().BoolVar(&patch, "patch", false, "apply STATE_JSON as an RFC 7386 merge patch")

	var afterSeq int64
	messages := &cobra.Command{Use: "messages SESSION", Short: "Read a session's turns (the buffer, or --after-seq: the durable log)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.Messages(cmd.Context(), args[0], afterSeq, 0)
			if err != nil {
				return err
			}
			rows := [][]string{}
			for _, t := range p.Items {
				rows = append(rows, []string{strconv.FormatInt(t.Seq, 10), ts(t.CreatedAt), t.Role, t.Content})
			}
			return a.print(p, []string{"SEQ", "AT", "ROLE", "CONTENT"}, rows)
		}}
	messages.Flags().Int64Var(&afterSeq, "after-seq", -1, "page the durable log after this seq (0: from the start)")

	var role string
	say := &cobra.Command{Use: "add-message SESSION CONTENT", Short: "Append a turn to a session", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.AddMessage(cmd.Context(), args[0], role, args[1], client.SessionWrite{})
			if err != nil {
				return err
			}
			return a.print(t, []string{"SEQ", "ROLE", "CONTENT"}, [][]string{{strconv.FormatInt(t.Seq, 10), t.Role, t.Content}})
		}}
	say.Flags().StringVar(&role, "role", "user", "user, assistant, system or tool")
	_ = say.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"user", "assistant", "system", "tool"}, cobra.ShellCompDirectiveNoFileComp))

	del := &cobra.Command{Use: "delete SESSION", Short: "Delete a session (state, turns and their durable copies)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.DeleteSession(cmd.Context(), args[0], nil); err != nil {
				return err
			}
			return a.print(map[string]any{"session_id": args[0], "deleted": true}, []string{"SESSION", "DELETED"}, [][]string{{args[0], "true"}})
		}}
	cmd.AddCommand(get, set, messages, say, del)
	return cmd
}

func (a *app) memoriesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "memories", Short: "Semantic memory: add, search, list, show, forget, extract"}
	var m client.NewMemory
	var importance float64
	var metadata, jobID string
	add := &cobra.Command{Use: "add TEXT", Short: "Write a memory (near-duplicates in the same scope are merged)", Args: cobra.ExactArgs(1),
		Example: "  strata memories add \"Acme's brand colour is warm teal\" --user u1 --kind preference",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			m.Text = args[0]
			if cmd.Flags().Changed("importance") {
				m.Importance = &importance
			}
			if metadata != "" {
				if err := json.Unmarshal([]byte(metadata), &m.Metadata); err != nil {
					return fmt.Errorf("--metadata must be a JSON object: %w", err)
				}
			}
			if jobID != "" {
				m.Provenance = &client.Provenance{JobID: jobID}
			}
			out, err := c.Remember(cmd.Context(), m)
			if err != nil {
				return err
			}
			state := "created"
			if out.Deduplicated {
				state = "deduplicated (existing memory)"
			}
			return a.print(out, []string{"ID", "KIND", "STATE", "TEXT"}, [][]string{{out.ID, out.Kind, state, out.Text}})
		}}
	add.Flags().StringVar(&m.Kind, "kind", "", "fact (default), preference, job, case, ...")
	add.Flags().Float64Var(&importance, "importance", 0.5, "0-1, a ranking feature")
	add.Flags().BoolVar(&m.Pinned, "pinned", false, "never decays, eviction keeps it")
	add.Flags().StringVar(&m.Trust, "trust", "", "verified, user_stated, agent_inferred (default), tool_output, consolidated")
	add.Flags().StringVar(&metadata, "metadata", "", "JSON object")
	add.Flags().StringVar(&jobID, "job", "", "the job it came from (provenance)")
	addScope(add, &m.Scope)

	var q client.SearchQuery
	search := &cobra.Command{Use: "search QUERY", Short: "Search memories (vector + full text, ranked, with the score breakdown in JSON)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			q.Query = args[0]
			res, err := c.Recall(cmd.Context(), q)
			if err != nil {
				return err
			}
			rows := [][]string{}
			for _, r := range res.Items {
				score, _ := r.Score["score"].(float64)
				stale := ""
				if r.Stale {
					stale = "stale"
				}
				rows = append(rows, []string{fmt.Sprintf("%.3f", score), r.Memory.ID, r.Memory.Kind, stale, r.Memory.Text})
			}
			return a.print(res, []string{"SCORE", "ID", "KIND", "", "TEXT"}, rows)
		}}
	search.Flags().IntVar(&q.TopK, "top-k", 10, "results wanted (max 100)")
	search.Flags().StringSliceVar(&q.Kinds, "kind", nil, "only these kinds")
	search.Flags().BoolVar(&q.ExcludeStale, "exclude-stale", false, "drop facts not verified recently")
	addScope(search, &q.Scope)

	show := &cobra.Command{Use: "get ID", Short: "Show a memory version", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			mem, err := c.GetMemory(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(mem, []string{"ID", "VERSION", "KIND", "TRUST", "TEXT"}, [][]string{{mem.ID, strconv.Itoa(mem.Version), mem.Kind, mem.Trust, mem.Text}})
		}}
	forget := &cobra.Command{Use: "forget ID", Short: "Delete a memory with all its versions", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ids, err := c.Forget(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(map[string]any{"id": args[0], "deleted_versions": ids}, []string{"ID", "VERSIONS_DELETED"}, [][]string{{args[0], strconv.Itoa(len(ids))}})
		}}
	cmd.AddCommand(add, search, a.memoriesListCmd(), show, forget, a.memoriesImportCmd(), a.memoriesExtractCmd())
	return cmd
}

func (a *app) kvCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "kv", Short: "Key-value memory: preferences, settings, rules (resolved session > agent > user > org)"}
	var sc client.Scope
	var exact bool
	get := &cobra.Command{Use: "get NAMESPACE KEY", Short: "Read a key; LEVEL says which scope answered", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			e, err := c.KVGet(cmd.Context(), args[0], args[1], sc, exact)
			if err != nil {
				return err
			}
			return a.print(e, []string{"KEY", "LEVEL", "VERSION", "VALUE"}, [][]string{{e.Namespace + "/" + e.Key, e.Level, strconv.FormatInt(e.Version, 10), oneLine(e.Value, 80)}})
		}}
	addScope(get, &sc)
	get.Flags().BoolVar(&exact, "exact", false, "read only the most specific level given")

	var sc2 client.Scope
	var ttl time.Duration
	var ifMatch int64
	set := &cobra.Command{Use: "set NAMESPACE KEY VALUE", Short: "Write a key at the most specific level given (org when none)", Args: cobra.ExactArgs(3),
		Example: "  strata kv set brand palette '{\"lut\": \"warm-teal\"}' --user u1\n  strata kv set preferences tone playful --session s1",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := jsonArg("VALUE", args[2])
			if err != nil {
				return err
			}
			var im *int64
			if cmd.Flags().Changed("if-match") {
				im = &ifMatch
			}
			e, err := c.KVSet(cmd.Context(), args[0], args[1], v, sc2, ttl, im)
			if err != nil {
				return err
			}
			return a.print(e, []string{"KEY", "LEVEL", "VERSION", "VALUE"}, [][]string{{e.Namespace + "/" + e.Key, e.Level, strconv.FormatInt(e.Version, 10), oneLine(e.Value, 80)}})
		}}
	addScope(set, &sc2)
	set.Flags().DurationVar(&ttl, "ttl", 0, "hide the entry after this long (e.g. 24h)")
	set.Flags().Int64Var(&ifMatch, "if-match", 0, "write only over this version")

	var sc3 client.Scope
	var resolve bool
	list := &cobra.Command{Use: "list NAMESPACE", Short: "List a namespace (--resolve: what a resolved read answers per key)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.KVList(cmd.Context(), args[0], sc3, resolve, "", 1000)
			if err != nil {
				return err
			}
			rows := [][]string{}
			for _, e := range p.Items {
				rows = append(rows, []string{e.Key, e.Level, strconv.FormatInt(e.Version, 10), oneLine(e.Value, 80)})
			}
			return a.print(p, []string{"KEY", "LEVEL", "VERSION", "VALUE"}, rows)
		}}
	addScope(list, &sc3)
	list.Flags().BoolVar(&resolve, "resolve", false, "resolve each key across levels")

	var sc4 client.Scope
	history := &cobra.Command{Use: "history NAMESPACE KEY", Short: "Every version of a key at one level, newest first", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.KVHistory(cmd.Context(), args[0], args[1], sc4, "", 1000)
			if err != nil {
				return err
			}
			rows := [][]string{}
			for _, v := range p.Items {
				rows = append(rows, []string{strconv.FormatInt(v.Version, 10), v.Op, ts(v.WrittenAt), v.WrittenBy, oneLine(v.Value, 60)})
			}
			return a.print(p, []string{"VERSION", "OP", "AT", "BY", "VALUE"}, rows)
		}}
	addScope(history, &sc4)

	var sc5 client.Scope
	del := &cobra.Command{Use: "delete NAMESPACE KEY", Short: "Delete a key at exactly the level given", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			e, err := c.KVDelete(cmd.Context(), args[0], args[1], sc5, nil)
			if err != nil {
				return err
			}
			return a.print(e, []string{"KEY", "LEVEL", "VERSION", "DELETED"}, [][]string{{e.Namespace + "/" + e.Key, e.Level, strconv.FormatInt(e.Version, 10), "true"}})
		}}
	addScope(del, &sc5)
	cmd.AddCommand(get, set, list, history, del)
	return cmd
}

func (a *app) contextCmd() *cobra.Command {
	var r client.ContextRequest
	var showPrompt bool
	cmd := &cobra.Command{Use: "context", Short: "Assemble a turn's context (what POST /v1/context gives an agent) and show what was left out",
		Example: "  strata context --job promo-7 --user u1 --query 'captions for reels' --max-tokens 1500",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			tc, err := c.Context(cmd.Context(), r)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.print(tc, nil, nil)
			}
			if showPrompt {
				fmt.Fprintln(a.out, tc.Prompt)
				fmt.Fprintln(a.out)
			}
			est := ""
			if tc.Estimated {
				est = " (estimated)"
			}
			fmt.Fprintf(a.out, "%d of %d tokens (%s, %s%s)\n\n", tc.Tokens, tc.MaxTokens, tc.Model, tc.Encoding, est)
			rows := [][]string{}
			for _, s := range tc.Sections {
				rows = append(rows, []string{s.Name, strconv.Itoa(s.Tokens), strconv.Itoa(len(s.Included)), strconv.Itoa(s.LeftOutCount), s.Note})
			}
			return a.print(nil, []string{"SECTION", "TOKENS", "INCLUDED", "LEFT_OUT", "NOTE"}, rows)
		}}
	addScope(cmd, &r.Scope)
	cmd.Flags().StringVar(&r.JobID, "job", "", "the job the agent works on")
	cmd.Flags().StringVar(&r.Query, "query", "", "what the turn is about")
	cmd.Flags().IntVar(&r.MaxTokens, "max-tokens", 0, "token budget (default 4000)")
	cmd.Flags().StringVar(&r.Model, "model", "", "model whose tokenizer counts (default gpt-4o)")
	cmd.Flags().StringSliceVar(&r.KVNamespaces, "kv", nil, "key-value namespaces that apply (default preferences,rules)")
	cmd.Flags().BoolVar(&showPrompt, "prompt", true, "print the assembled prompt")
	_ = cmd.RegisterFlagCompletionFunc("job", a.completeJobs)
	return cmd
}

func (a *app) toolsCmd() *cobra.Command {
	return &cobra.Command{Use: "tools", Short: "Print the agent tools as OpenAI function-calling schemas (also served over MCP at /mcp)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			tools, err := c.Tools(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.print(tools, nil, nil)
			}
			rows := [][]string{}
			for _, t := range tools {
				d := t.Function.Description
				if i := strings.Index(d, ". "); i > 0 {
					d = d[:i+1]
				}
				rows = append(rows, []string{t.Function.Name, d})
			}
			return a.print(nil, []string{"TOOL", "WHAT IT DOES"}, rows)
		}}
}
