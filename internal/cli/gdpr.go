package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/progress"
)

// gdprCmd is `strata gdpr`: data-subject requests for compliance staff.
func (a *app) gdprCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "gdpr", Short: "Data-subject requests: erase, export, restrict (compliance keys)"}

	var reason string
	var wait, noProgress bool
	erase := &cobra.Command{
		Use:   "erase USER_ID",
		Short: "Erase a data subject everywhere (GDPR Art. 17); --wait follows it to the receipt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			e, err := c.RequestErasure(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			if !wait {
				return a.printErasure(e)
			}
			fmt.Fprintf(a.errOut, "erasure %s accepted (deadline %s)\n", e.ID, e.Deadline.Format(time.RFC3339))
			e, err = a.followErasure(cmd.Context(), c, e.ID, noProgress)
			if err != nil {
				return err
			}
			return a.printErasure(e)
		},
	}
	erase.Flags().StringVar(&reason, "reason", "", "why (e.g. the ticket of the subject's request)")
	erase.Flags().BoolVar(&wait, "wait", false, "wait for the erasure to finish, showing progress, then print the receipt")
	erase.Flags().BoolVar(&noProgress, "no-progress", false, "no progress bar (with --wait)")

	var statusWait bool
	status := &cobra.Command{
		Use:   "status ERASURE_ID",
		Short: "An erasure's status and receipt (counts per tier, verification)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var e client.Erasure
			if statusWait {
				e, err = a.followErasure(cmd.Context(), c, args[0], noProgress)
			} else {
				e, err = c.GetErasure(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			return a.printErasure(e)
		},
	}
	status.Flags().BoolVar(&statusWait, "wait", false, "wait until it finished, showing progress")
	status.Flags().BoolVar(&noProgress, "no-progress", false, "no progress bar (with --wait)")

	var file string
	export := &cobra.Command{
		Use:   "export USER_ID -f FILE",
		Short: "Export everything held about a data subject (GDPR Art. 15) to an NDJSON file",
		Long: "Export everything held about a data subject (GDPR Art. 15) to an NDJSON file. The export is " +
			"written to a temporary file beside FILE (readable by you only) and renamed to FILE once complete: " +
			"a failed export (a wrong key, a lost connection) leaves no file, and an existing FILE untouched.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if file == "" {
				return errors.New("--file is required (the export can be large; it is written as it arrives)")
			}
			// Written beside FILE and renamed when complete, so a failure leaves neither an
			// empty nor a partial export.
			f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".part-*")
			if err != nil {
				return err
			}
			tmp := f.Name()
			defer os.Remove(tmp) // nothing to remove once renamed
			w := bufio.NewWriterSize(f, 1<<20)
			bar := progress.New(a.errOut, -1, "exporting", progress.Options{Hidden: noProgress, Bytes: true, ShowCount: true,
				ClearOnFinish: true})
			var prev int64
			sum, err := c.Export(cmd.Context(), args[0], w, func(_, n int64) { bar.Add(n - prev); prev = n })
			bar.Finish()
			if ferr := w.Flush(); err == nil {
				err = ferr
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp, file)
			}
			if err != nil {
				return fmt.Errorf("export to %s: %w", file, err)
			}
			rows := [][]string{}
			keys := make([]string, 0, len(sum.Counts))
			for k := range sum.Counts {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				rows = append(rows, []string{k, strconv.FormatInt(sum.Counts[k], 10)})
			}
			fmt.Fprintf(a.errOut, "wrote %d records (%d bytes) to %s\n", sum.Records, prev, file)
			return a.print(sum, []string{"TYPE", "RECORDS"}, rows)
		},
	}
	export.Flags().StringVarP(&file, "file", "f", "", "file to write (NDJSON)")
	export.Flags().BoolVar(&noProgress, "no-progress", false, "no progress bar")

	restrict := &cobra.Command{
		Use:   "restrict USER_ID",
		Short: "Restrict processing of a subject's data (GDPR Art. 18): kept, but not served to agents",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Restrict(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			return a.print(r, []string{"USER", "RESTRICTED", "SINCE"}, [][]string{{r.UserID, "yes", r.RestrictedAt.Format(time.RFC3339)}})
		},
	}
	restrict.Flags().StringVar(&reason, "reason", "", "why (e.g. accuracy contested)")
	unrestrict := &cobra.Command{
		Use:   "unrestrict USER_ID",
		Short: "Lift a restriction of processing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.Unrestrict(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.print(map[string]any{"user_id": args[0], "restricted": false}, []string{"USER", "RESTRICTED"}, [][]string{{args[0], "no"}})
		},
	}
	cmd.AddCommand(erase, status, export, restrict, unrestrict)
	return cmd
}

// followErasure polls until the erasure finished, with a progress bar over its phases.
func (a *app) followErasure(ctx context.Context, c *client.Client, id string, quiet bool) (client.Erasure, error) {
	bar := progress.New(a.errOut, 100, "erasing", progress.Options{Hidden: quiet, Percent: true, ClearOnFinish: true})
	e, err := c.WaitErasure(ctx, id, 500*time.Millisecond, func(e client.Erasure) {
		phase := "queued"
		if e.Status == "running" {
			phase = "running"
			for _, p := range e.Phases {
				if !contains(e.PhasesDone, p) {
					phase = p
					break
				}
			}
		}
		bar.Describe("erasing: " + phase)
		bar.Set(int64(e.Progress() * 100))
	})
	bar.Finish()
	return e, err
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (a *app) printErasure(e client.Erasure) error {
	rows := [][]string{{"id", e.ID}, {"status", e.Status}, {"subject", e.Subject}, {"requested_at", e.RequestedAt.Format(time.RFC3339)},
		{"deadline", e.Deadline.Format(time.RFC3339)}}
	if e.FinishedAt != nil {
		rows = append(rows, []string{"finished_at", e.FinishedAt.Format(time.RFC3339)})
	}
	tiers := make([]string, 0, len(e.Counts))
	for t := range e.Counts {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	for _, t := range tiers {
		items := make([]string, 0, len(e.Counts[t]))
		for k, v := range e.Counts[t] {
			items = append(items, k+"="+strconv.FormatInt(v, 10))
		}
		sort.Strings(items)
		rows = append(rows, []string{"erased." + t, strings.Join(items, " ")})
	}
	if v := e.Verification; v != nil {
		verdict := "clean: every tier re-queried, nothing left"
		if !v.Clean {
			left := []string{}
			for k, n := range v.Remaining {
				if n != 0 {
					left = append(left, k+"="+strconv.FormatInt(n, 10))
				}
			}
			sort.Strings(left)
			verdict = "NOT CLEAN: " + strings.Join(left, " ")
		}
		rows = append(rows, []string{"verification", verdict})
	}
	if e.LastError != "" {
		rows = append(rows, []string{"last_error", e.LastError})
	}
	return a.print(e, []string{"FIELD", "VALUE"}, rows)
}
