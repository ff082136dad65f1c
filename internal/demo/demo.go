// Package demo is `strata demo`: a scripted media job (cut, colour to the brand read from
// key-value memory, reframe for three channels, caption each, export) run by a worker
// subprocess that the demo SIGKILLs mid-way, restarts, and lets resume from Strata. The
// timeline it prints shows every step done exactly once and the settled colour profile
// re-used, not recomputed — read back from Strata's own event log and steps. The worker is
// written with the Go client's step helpers (client.RunStep around each step, client.Once
// around each side effect): it is the example docs/jobs.md points to.
package demo

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strata-mem/strata/client"
)

// Owner is the agent id the worker claims steps as. A restarted worker is the same agent,
// so it gets its own claim back (same fencing token) instead of waiting for the lease.
const Owner = "media-agent"

// Channel is one delivery target.
type Channel struct{ Name, Aspect string }

// Channels are the three reframes.
var Channels = []Channel{{"tiktok", "9:16"}, {"reels", "4:5"}, {"shorts", "9:16"}}

// step is one step of the plan.
type step struct {
	ID      string
	Op      string // the side effect's op in the event log
	Channel *Channel
}

// Plan is the job's steps in order.
func Plan() []step {
	p := []step{{ID: "cut", Op: "video.cut"}, {ID: "colour", Op: "video.grade"}}
	for i := range Channels {
		p = append(p, step{ID: "reframe-" + Channels[i].Name, Op: "video.reframe", Channel: &Channels[i]})
	}
	for i := range Channels {
		p = append(p, step{ID: "caption-" + Channels[i].Name, Op: "video.caption", Channel: &Channels[i]})
	}
	return append(p, step{ID: "export", Op: "video.export"})
}

// StepIDs lists the plan's step ids.
func StepIDs() []string {
	var ids []string
	for _, s := range Plan() {
		ids = append(ids, s.ID)
	}
	return ids
}

// DefaultCrashAt is the step whose render the first worker is killed after (before it is
// marked complete): the middle of the job.
const DefaultCrashAt = "reframe-reels"

// Line is one thing a worker reports on its stdout (one JSON object per line).
type Line struct {
	Run    int    `json:"run"`
	Step   string `json:"step"`
	Action string `json:"action"` // claimed, skipped, reused, computed, settled_before, rendered, already_applied, completed, crashpoint, done
	Detail string `json:"detail,omitempty"`
	Seq    int64  `json:"seq,omitempty"`
}

// Worker environment: how the demo passes its settings to the worker process.
const (
	EnvWorker  = "STRATA_DEMO_WORKER"
	envJob     = "STRATA_DEMO_JOB"
	envUser    = "STRATA_DEMO_USER"
	envRun     = "STRATA_DEMO_RUN"
	envCrashAt = "STRATA_DEMO_CRASH_AT"
	envOut     = "STRATA_DEMO_OUT"
)

// WorkerConfig is what one worker run needs.
type WorkerConfig struct {
	Job, User, OutDir string
	Run               int
	CrashAt           string // "" : never
}

// WorkerConfigFromEnv reads the worker's settings.
func WorkerConfigFromEnv(getenv func(string) string) (WorkerConfig, error) {
	run, err := strconv.Atoi(getenv(envRun))
	if err != nil {
		return WorkerConfig{}, fmt.Errorf("%s: %w", envRun, err)
	}
	wc := WorkerConfig{Job: getenv(envJob), User: getenv(envUser), OutDir: getenv(envOut), Run: run, CrashAt: getenv(envCrashAt)}
	if wc.Job == "" || wc.OutDir == "" {
		return wc, errors.New("the demo worker runs under `strata demo`, which sets its environment")
	}
	return wc, nil
}

// Profile is the settled colour profile, computed once from the brand palette.
type Profile struct {
	ID      string          `json:"id"`
	LUT     string          `json:"lut"`
	Palette json.RawMessage `json:"palette"`
}

func computeProfile(palette json.RawMessage) Profile {
	h := sha256.Sum256(palette)
	id := "cp-" + hex.EncodeToString(h[:3])
	return Profile{ID: id, LUT: "lut/" + id + ".cube", Palette: palette}
}

// stepResult is what a step returns and Strata stores: the render's output, and for the
// colour step the settled profile that later steps (and restarts) re-use.
type stepResult struct {
	Output        string   `json:"output"`
	Profile       *Profile `json:"profile,omitempty"`
	ColourProfile string   `json:"colour_profile,omitempty"`
}

// Worker is the worker process. Each step is one client.RunStep (claim, heartbeat, complete
// under the fencing token; a completed step returns its stored result without running) and
// each side effect one client.Once (skipped when the job's log already shows it applied,
// logged when done). So a restarted worker never redoes a finished step, and the step that
// was cut off between its render and its completion finds the render in the log.
func Worker(ctx context.Context, c *client.Client, wc WorkerConfig, stdout io.Writer) error {
	enc := json.NewEncoder(stdout)
	say := func(l Line) {
		l.Run = wc.Run
		_ = enc.Encode(l)
	}
	r, err := c.ResumeJob(ctx, wc.Job, 0)
	if err != nil {
		return fmt.Errorf("resuming: %w", err)
	}
	cpVersion := r.Job.CheckpointVersion
	scope := client.OnceScope(client.Scope{AgentID: Owner, UserID: wc.User})
	var profile *Profile
	var done []string
	plan := Plan()
	for i, st := range plan {
		ran := false
		res, err := client.RunStep(ctx, c, wc.Job, st.ID, func(ctx context.Context) (stepResult, error) {
			ran = true
			claim, _ := client.StepFromContext(ctx)
			say(Line{Step: st.ID, Action: "claimed", Detail: strconv.FormatInt(claim.FencingToken, 10)})
			params := map[string]any{"source": "raw/promo.mov"}
			switch {
			case st.ID == "colour":
				// The expensive decision: settle the colour profile from the brand, once.
				e, err := c.KVGet(ctx, "brand", "palette", client.Scope{UserID: wc.User}, false)
				if err != nil {
					return stepResult{}, fmt.Errorf("reading the brand palette from kv brand/palette: %w", err)
				}
				computed := false
				var ev client.Event
				p, err := client.Once(ctx, c, wc.Job, "colour.settle_profile", map[string]any{"palette": e.Value},
					func(context.Context, string) (Profile, error) { computed = true; return computeProfile(e.Value), nil },
					scope, client.OnceEvent(&ev))
				if err != nil {
					return stepResult{}, err
				}
				if computed {
					say(Line{Step: st.ID, Action: "computed", Detail: p.ID + " from kv brand/palette (" + e.Level + ")", Seq: ev.Seq})
				} else {
					say(Line{Step: st.ID, Action: "settled_before", Detail: p.ID, Seq: ev.Seq})
				}
				profile = &p
				params["lut"] = p.LUT
			case st.Channel != nil:
				params["channel"], params["aspect"] = st.Channel.Name, st.Channel.Aspect
				params["lut"] = profile.LUT
			case st.ID == "export":
				var outs []string
				for _, id := range done {
					if strings.HasPrefix(id, "caption-") {
						outs = append(outs, id)
					}
				}
				params["inputs"], params["lut"] = outs, profile.LUT
			}
			params["step"] = st.ID
			rendered := false
			var ev client.Event
			res, err := client.Once(ctx, c, wc.Job, st.Op, params, func(_ context.Context, key string) (stepResult, error) {
				// The side effect. Its output name is fixed by the step, so doing it again after a
				// crash before it was logged rewrites the same file: idempotent on Once's key.
				rendered = true
				out := filepath.Join(wc.OutDir, st.ID+".mp4")
				if err := os.WriteFile(out, []byte(fmt.Sprintf("%s %v\nkey %s\n", st.Op, params, key)), 0o644); err != nil {
					return stepResult{}, err
				}
				res := stepResult{Output: out}
				if st.ID == "colour" {
					res.Profile = profile // the settled decision later steps (and restarts) re-use
				} else if profile != nil {
					res.ColourProfile = profile.ID
				}
				return res, nil
			}, scope, client.OnceEvent(&ev))
			if err != nil {
				return stepResult{}, err
			}
			if rendered {
				say(Line{Step: st.ID, Action: "rendered", Detail: filepath.Base(res.Output), Seq: ev.Seq})
			} else {
				say(Line{Step: st.ID, Action: "already_applied", Detail: "render of run before the crash", Seq: ev.Seq})
			}
			if st.ID == wc.CrashAt {
				say(Line{Step: st.ID, Action: "crashpoint"})
				// Wait to be killed (kill -9 by the demo): the step stays claimed, not complete.
				<-ctx.Done()
				return stepResult{}, ctx.Err()
			}
			return res, nil
		}, client.StepOwner(Owner), client.StepInputOf(client.StepInput{Tool: "ffmpeg"}))
		if err != nil {
			return err
		}
		done = append(done, st.ID)
		if st.ID == "colour" {
			if res.Profile == nil || res.Profile.ID == "" {
				return fmt.Errorf("colour step result has no profile: %+v", res)
			}
			profile = res.Profile
		}
		if !ran {
			if st.ID == "colour" {
				say(Line{Step: st.ID, Action: "reused", Detail: profile.ID})
			} else {
				say(Line{Step: st.ID, Action: "skipped"})
			}
			continue
		}
		pending := []string{}
		for _, p := range plan[i+1:] {
			pending = append(pending, p.ID)
		}
		next := "all steps done: mark the job completed"
		if len(pending) > 0 {
			next = "start step " + pending[0]
		}
		state := map[string]any{}
		if profile != nil {
			state["colour_profile"] = profile
		}
		cp, err := c.PutCheckpoint(ctx, wc.Job, client.CheckpointInput{CurrentStep: st.ID, Done: done, Pending: pending,
			NextAction: next, State: state, AgentID: Owner, UserID: wc.User}, cpVersion)
		if err != nil {
			return fmt.Errorf("checkpoint after %s: %w", st.ID, err)
		}
		cpVersion = cp.Version
		say(Line{Step: st.ID, Action: "completed", Detail: "checkpoint v" + strconv.FormatInt(cp.Version, 10)})
	}
	say(Line{Action: "done"})
	return nil
}

// Options configures a demo run.
type Options struct {
	Client *client.Client
	// URL and Key are passed to the worker process.
	URL, Key string
	Job      string // default NewJobID: each run its own job
	User     string // default demo-user
	CrashAt  string // default DefaultCrashAt; "none" never crashes
	OutDir   string // default a temp directory
	// Worker returns the command that runs one worker process (`strata demo worker`, or a
	// re-executed test binary); Run adds its environment.
	Worker func() *exec.Cmd
	// Progress is told how many steps are complete (of total) as the job advances.
	Progress func(done, total int)
	Out      io.Writer // the timeline
}

// StepReport is one step as Strata recorded it.
type StepReport struct {
	Step        string `json:"step"`
	Status      string `json:"status"`
	Attempts    int    `json:"attempts"`
	Token       int64  `json:"fencing_token"`
	SideEffects int    `json:"side_effects" doc:"Events of the step's op for this step in the log."`
	CompletedIn int    `json:"completed_in_run"`
	ReusedIn    []int  `json:"skipped_in_runs,omitempty"`
}

// Report is what the demo proved.
type Report struct {
	Job             string       `json:"job"`
	Runs            int          `json:"runs"`
	Kills           int          `json:"kills"`
	KilledAt        string       `json:"killed_at,omitempty"`
	Steps           []StepReport `json:"steps"`
	Profile         string       `json:"colour_profile"`
	ProfileComputed int          `json:"colour_profile_computed"`
	ProfileUsedBy   int          `json:"colour_profile_used_by"`
	Events          int          `json:"events"`
	Lines           []Line       `json:"timeline"`
}

// ExactlyOnce reports whether every step completed once with one side effect and the
// profile was computed once.
func (r Report) ExactlyOnce() bool {
	for _, s := range r.Steps {
		if s.Status != "completed" || s.SideEffects != 1 {
			return false
		}
	}
	return r.ProfileComputed == 1 && len(r.Steps) == len(Plan())
}

// NewJobID is a fresh job id for a run of the demo: media-demo-<UTC time>-<random>, unique
// per run (two runs in one second, or against a server that kept an earlier run's job, each
// get their own job; a job id from the clock alone made the second of two quick runs resume
// the first's completed job and fail).
func NewJobID(now time.Time) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return "media-demo-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// Run runs the demo: set the brand palette if absent, create the job, run a worker and
// kill -9 it at the crash point, run another that resumes, then verify from Strata and print
// the timeline.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Job == "" {
		o.Job = NewJobID(time.Now())
	}
	if o.User == "" {
		o.User = "demo-user"
	}
	if o.CrashAt == "" {
		o.CrashAt = DefaultCrashAt
	}
	if o.CrashAt == "none" {
		o.CrashAt = ""
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.OutDir == "" {
		d, err := os.MkdirTemp("", "strata-demo-")
		if err != nil {
			return Report{}, err
		}
		o.OutDir = d
	}
	c := o.Client
	rep := Report{Job: o.Job}
	w := o.Out
	fmt.Fprintf(w, "Strata media-job demo: job %s, user %s, against %s\n", o.Job, o.User, c.BaseURL())

	pal, err := c.KVGet(ctx, "brand", "palette", client.Scope{UserID: o.User}, false)
	if client.IsNotFound(err) {
		pal, err = c.KVSet(ctx, "brand", "palette", map[string]any{"primary": "#1A7F8E", "accent": "#F2A541", "mood": "warm"},
			client.Scope{UserID: o.User}, 0, nil)
	}
	if err != nil {
		return rep, fmt.Errorf("brand palette: %w", err)
	}
	fmt.Fprintf(w, "Brand palette (kv brand/palette, %s level): %s\n", pal.Level, pal.Value)
	if _, _, err := c.PutJob(ctx, o.Job, client.JobSpec{Goal: "Spring promo: cut, colour to brand, reframe and caption for " +
		"TikTok, Reels and Shorts, export", Owner: Owner, Scope: client.Scope{UserID: o.User}}, nil); err != nil {
		return rep, fmt.Errorf("creating the job: %w", err)
	}

	total := len(Plan())
	completed := map[string]bool{}
	runWorker := func(run int, crashAt string) error {
		cmd := o.Worker()
		cmd.Env = append(os.Environ(), "STRATA_URL="+o.URL, "STRATA_API_KEY="+o.Key, EnvWorker+"=1",
			envJob+"="+o.Job, envUser+"="+o.User, envRun+"="+strconv.Itoa(run), envCrashAt+"="+crashAt, envOut+"="+o.OutDir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting the worker: %w", err)
		}
		rep.Runs++
		fmt.Fprintf(w, "\nrun %d: worker pid %d\n", run, cmd.Process.Pid)
		killed := false
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l Line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			rep.Lines = append(rep.Lines, l)
			printLine(w, l)
			if l.Action == "completed" || l.Action == "skipped" || l.Action == "reused" {
				completed[l.Step] = true
				if o.Progress != nil {
					o.Progress(len(completed), total)
				}
			}
			if l.Action == "crashpoint" {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				killed = true
				rep.Kills++
				rep.KilledAt = l.Step
				fmt.Fprintf(w, "  ✗ kill -9 %d: %s was rendered and logged but never marked complete\n", cmd.Process.Pid, l.Step)
			}
		}
		err = cmd.Wait()
		if killed {
			return nil
		}
		if err != nil {
			return fmt.Errorf("worker run %d: %w", run, err)
		}
		return nil
	}
	if err := runWorker(1, o.CrashAt); err != nil {
		return rep, err
	}
	if rep.Kills > 0 {
		r, err := c.ResumeJob(ctx, o.Job, 0)
		if err != nil {
			return rep, err
		}
		fmt.Fprintf(w, "\nrestart: Strata says %d steps done, %d in flight (%s), next: %s\n",
			len(r.CompletedSteps), len(r.InFlight), inFlight(r), r.NextAction)
		if err := runWorker(2, ""); err != nil {
			return rep, err
		}
	}
	if _, err := c.CompleteJob(ctx, o.Job, "completed", map[string]any{"outputs": len(Channels), "out_dir": o.OutDir}); err != nil {
		return rep, err
	}
	if err := verify(ctx, c, &rep); err != nil {
		return rep, err
	}
	printReport(w, rep)
	return rep, nil
}

func inFlight(r client.Resume) string {
	var s []string
	for _, st := range r.InFlight {
		s = append(s, st.StepID+" held by "+st.Owner)
	}
	return strings.Join(s, ", ")
}

func printLine(w io.Writer, l Line) {
	seq := ""
	if l.Seq > 0 {
		seq = fmt.Sprintf("event #%d", l.Seq)
	}
	switch l.Action {
	case "skipped":
		fmt.Fprintf(w, "  = %-15s done before the crash: not run again\n", l.Step)
	case "reused":
		fmt.Fprintf(w, "  = %-15s done before the crash: colour profile %s re-used, not recomputed\n", l.Step, l.Detail)
	case "computed":
		fmt.Fprintf(w, "  ✓ %-15s colour profile %s settled %s\n", l.Step, l.Detail, seq)
	case "rendered":
		fmt.Fprintf(w, "  ✓ %-15s rendered %-22s %s\n", l.Step, l.Detail, seq)
	case "already_applied":
		fmt.Fprintf(w, "  ↺ %-15s render already in the log (%s): not redone\n", l.Step, seq)
	case "settled_before":
		fmt.Fprintf(w, "  ↺ %-15s colour profile %s already settled (%s): not recomputed\n", l.Step, l.Detail, seq)
	case "completed":
		fmt.Fprintf(w, "    %-15s complete, %s\n", l.Step, l.Detail)
	case "done":
		fmt.Fprintf(w, "  worker finished\n")
	}
}

// verify reads the truth back from Strata: steps, and the event log.
func verify(ctx context.Context, c *client.Client, rep *Report) error {
	steps, err := c.ListSteps(ctx, rep.Job, "", 1000)
	if err != nil {
		return err
	}
	var evs []client.Event
	after := int64(0)
	for {
		p, err := c.ListEvents(ctx, rep.Job, client.EventFilter{AfterSeq: after}, 1000)
		if err != nil {
			return err
		}
		evs = append(evs, p.Items...)
		if p.NextCursor == "" || len(p.Items) == 0 {
			break
		}
		after = p.Items[len(p.Items)-1].Seq
	}
	rep.Events = len(evs)
	effects := map[string]int{}
	for _, e := range evs {
		var p struct {
			Step string `json:"step"`
			LUT  string `json:"lut"`
		}
		_ = json.Unmarshal(e.Params, &p)
		switch {
		case e.Op == "colour.settle_profile":
			rep.ProfileComputed++
			var pr Profile
			_ = json.Unmarshal(e.Result, &pr)
			rep.Profile = pr.ID
		case p.Step != "":
			effects[p.Step]++
			if p.LUT != "" && p.Step != "colour" {
				rep.ProfileUsedBy++
			}
		}
	}
	byStep := map[string]client.Step{}
	for _, s := range steps.Items {
		byStep[s.StepID] = s
	}
	completedIn, skippedIn := map[string]int{}, map[string][]int{}
	for _, l := range rep.Lines {
		switch l.Action {
		case "completed":
			completedIn[l.Step] = l.Run
		case "skipped", "reused":
			skippedIn[l.Step] = append(skippedIn[l.Step], l.Run)
		}
	}
	for _, id := range StepIDs() {
		s := byStep[id]
		rep.Steps = append(rep.Steps, StepReport{Step: id, Status: s.Status, Attempts: s.Attempts, Token: s.FencingToken,
			SideEffects: effects[id], CompletedIn: completedIn[id], ReusedIn: skippedIn[id]})
	}
	return nil
}

func printReport(w io.Writer, r Report) {
	fmt.Fprintf(w, "\nTimeline, as Strata recorded it (%d events in the job's log):\n", r.Events)
	fmt.Fprintf(w, "  %-15s %-10s %-13s %-9s %s\n", "STEP", "STATUS", "SIDE EFFECTS", "DONE IN", "AFTER THE RESTART")
	for _, s := range r.Steps {
		after := ""
		if len(s.ReusedIn) > 0 {
			after = "skipped (already done)"
			if s.Step == "colour" {
				after = "profile " + r.Profile + " re-used"
			}
		}
		if s.Step == r.KilledAt {
			after = "render found in the log: completed without redoing it"
		}
		fmt.Fprintf(w, "  %-15s %-10s %-13d run %-5d %s\n", s.Step, s.Status, s.SideEffects, s.CompletedIn, after)
	}
	verdict := "OK"
	if !r.ExactlyOnce() {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "\n%s: %d runs, %d kill -9; every step done exactly once (%d side effects for %d steps); "+
		"colour profile %s computed %d×, used by %d later steps.\n",
		verdict, r.Runs, r.Kills, sumEffects(r), len(r.Steps), r.Profile, r.ProfileComputed, r.ProfileUsedBy)
}

func sumEffects(r Report) int {
	n := 0
	for _, s := range r.Steps {
		n += s.SideEffects
	}
	return n
}
