package cli

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/internal/demo"
)

// workerCommand re-executes this binary as the demo's worker process. Tests replace it
// (the test binary re-executes itself instead).
var workerCommand = func() *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	return exec.Command(self, "demo", "worker")
}

func (a *app) demoCmd() *cobra.Command {
	var o demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a media job that crashes itself mid-way (kill -9), restarts and resumes from Strata",
		Long: "Runs a scripted media job against the server — cut, colour to the brand palette read from key-value memory " +
			"(kv brand/palette), reframe for TikTok, Reels and Shorts, caption each, export — in a worker subprocess. " +
			"The demo kills the worker with SIGKILL after it rendered " + demo.DefaultCrashAt + " but before it marked it " +
			"complete, starts a new worker, and that one resumes from Strata. The timeline shows every step done exactly " +
			"once and the settled colour profile re-used rather than recomputed. Exits 1 if that did not hold.",
		Example: "  make run   # in another terminal; then, with the admin key it printed:\n  STRATA_API_KEY=sk_… strata demo",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			o.Client, o.URL, o.Key, o.Worker = c, a.url, a.apiKey(), workerCommand
			bar := a.newBar(int64(len(demo.Plan())), "media job")
			o.Progress = func(done, _ int) { bar.Set(int64(done)) }
			// The timeline's lines go above the bar: on a terminal the bar is cleared
			// and redrawn around each; in a pipe both are plain lines.
			o.Out = bar.Writer(a.out)
			if a.output == "json" {
				o.Out = nil
			}
			rep, err := demo.Run(cmd.Context(), o)
			bar.Finish()
			if err != nil {
				return err
			}
			if a.output == "json" {
				if err := a.print(rep, nil, nil); err != nil {
					return err
				}
			}
			if !rep.ExactlyOnce() {
				return fmt.Errorf("the demo's job did not run every step exactly once: see `strata jobs events %s` and `strata jobs steps %s`", rep.Job, rep.Job)
			}
			if a.output == "table" {
				fmt.Fprintf(a.errOut, "Explore it: strata jobs resume %s · strata jobs events %s · strata context --job %s --user %s --kv brand\n",
					rep.Job, rep.Job, rep.Job, "demo-user")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Job, "job", "", "job id (default media-demo-<UTC time>-<random>: a new job each run)")
	cmd.Flags().StringVar(&o.User, "user", "demo-user", "the data subject the job is for")
	cmd.Flags().StringVar(&o.CrashAt, "crash-at", demo.DefaultCrashAt, "step after whose render the worker is killed (none: no crash)")
	_ = cmd.RegisterFlagCompletionFunc("crash-at", cobra.FixedCompletions(append(demo.StepIDs(), "none"), cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().StringVar(&o.OutDir, "out", "", "where the worker writes its renders (default a temp directory)")

	worker := &cobra.Command{
		Use: "worker", Hidden: true, Short: "The demo's worker process (started by `strata demo`)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			wc, err := demo.WorkerConfigFromEnv(a.getenv)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return demo.Worker(cmd.Context(), c, wc, a.out)
		},
	}
	cmd.AddCommand(worker)
	return cmd
}
