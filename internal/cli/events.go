package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
)

func (a *app) eventsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Follow the org's events (docs/events.md)"}
	var types []string
	var job string
	var after int64
	tail := &cobra.Command{
		Use:   "tail",
		Short: "Print events as they happen, one line each; reconnects and resumes after the last one",
		Example: "  strata events tail --type job.stalled --type step.failed\n" +
			"  strata events tail --job video-42 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var split []string
			for _, t := range types {
				split = append(split, strings.Split(t, ",")...)
			}
			err = c.StreamEvents(cmd.Context(), client.StreamOptions{Types: split, Job: job, After: after,
				Reconnected: func(err error, after int64) {
					fmt.Fprintf(a.errOut, "stream lost (%v); resuming after %d\n", err, after)
				}}, func(e client.StreamEvent) error {
				if a.output == "json" {
					line, _ := json.Marshal(e)
					_, err := fmt.Fprintln(a.out, string(line))
					return err
				}
				job := e.JobID
				if job == "" {
					job = "-"
				}
				_, err := fmt.Fprintf(a.out, "%d\t%s\t%s\tjob=%s\t%s\n", e.Seq, e.CreatedAt.Format("2006-01-02T15:04:05.000Z07:00"),
					e.Type, job, e.Data)
				return err
			})
			if errors.Is(err, context.Canceled) {
				return nil // interrupted: a normal end of a tail
			}
			return err
		},
	}
	tail.Flags().StringSliceVar(&types, "type", nil, "only these event types (repeat or comma-separate)")
	tail.Flags().StringVar(&job, "job", "", "only this job's events")
	tail.Flags().Int64Var(&after, "after", 0, "start after this event id (seq)")
	cmd.AddCommand(tail)
	return cmd
}
