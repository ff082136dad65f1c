package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
)

// lifecycleCmds are `strata policies`, `strata eviction` and `strata consolidation`
// (admin keys).
func (a *app) lifecycleCmds() []*cobra.Command {
	return []*cobra.Command{a.policiesCmd(), a.evictionCmd(), a.consolidationCmd()}
}

func (a *app) policiesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policies", Short: "Read or replace the org's memory lifecycle policy (admin)"}
	get := &cobra.Command{
		Use:   "get",
		Short: "Print the effective policy (the org's settings over the defaults)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.GetPolicies(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.print(p, nil, nil)
			}
			fmt.Fprintf(a.out, "org %s, version %d\n", p.OrgID, p.Version)
			return writeIndented(a.out, p.Policy)
		},
	}
	var file string
	var ifMatch int64
	set := &cobra.Command{
		Use:     "set -f FILE",
		Short:   "Replace the policy with a JSON document (absent fields follow the defaults)",
		Example: "  strata policies get -o json | jq .stored > p.json   # edit p.json\n  strata policies set -f p.json --if-match 3",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("--file is required (a JSON policy document, or - for stdin)")
			}
			var raw []byte
			var err error
			if file == "-" {
				raw, err = io.ReadAll(cmd.InOrStdin())
			} else {
				raw, err = os.ReadFile(file)
			}
			if err != nil {
				return err
			}
			if !json.Valid(raw) {
				return fmt.Errorf("%s is not valid JSON", file)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.PutPolicies(cmd.Context(), raw, ifMatch)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.print(p, nil, nil)
			}
			fmt.Fprintf(a.out, "stored version %d\n", p.Version)
			return nil
		},
	}
	set.Flags().StringVarP(&file, "file", "f", "", "JSON policy document (- for stdin)")
	set.Flags().Int64Var(&ifMatch, "if-match", -1, "only if the stored version is still this one")
	cmd.AddCommand(get, set)
	return cmd
}

func writeIndented(w io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) printEviction(r client.EvictionReport) error {
	rows := make([][]string, 0, len(r.Items))
	for _, it := range r.Items {
		more := ""
		if it.More {
			more = " (more)"
		}
		rows = append(rows, []string{it.Tier, it.Reason, it.Kind, it.Policy, strconv.Itoa(it.Count) + more, strings.Join(it.SampleIDs, ",")})
	}
	if err := a.print(r, []string{"TIER", "REASON", "KIND", "POLICY", "COUNT", "SAMPLE IDS"}, rows); err != nil {
		return err
	}
	if a.output == "table" {
		verb := "would remove"
		if r.Applied {
			verb = "removed"
		}
		fmt.Fprintf(a.out, "%s %d items (policy version %d); %d facts need re-verification\n", verb, r.Total, r.PolicyVersion, r.NeedsVerification)
	}
	return nil
}

func (a *app) evictionCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "eviction", Short: "Preview or apply the eviction policy now (admin)"}
	preview := &cobra.Command{
		Use:   "preview",
		Short: "What a run would remove now, per tier, reason and kind (changes nothing)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.PreviewEviction(cmd.Context())
			if err != nil {
				return err
			}
			return a.printEviction(r)
		},
	}
	run := &cobra.Command{
		Use:   "run",
		Short: "Apply the policy now (audited)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.RunEviction(cmd.Context())
			if err != nil {
				return err
			}
			return a.printEviction(r)
		},
	}
	cmd.AddCommand(preview, run)
	return cmd
}

func (a *app) consolidationCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "consolidation", Short: "Consolidate memory now (admin)"}
	var tasks []string
	run := &cobra.Command{
		Use:     "run",
		Short:   "Job summaries, episodic compaction, near-duplicate merge and promotion, now",
		Example: "  strata consolidation run --task merge --task promotion",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.RunConsolidation(cmd.Context(), tasks)
			if err != nil {
				return err
			}
			js, co, m, p := r.JobSummaries, r.Compaction, r.Merge, r.Promotion
			return a.print(r, []string{"TASK", "RESULT"}, [][]string{
				{"job_summaries", fmt.Sprintf("%d written, %d existed, %d skipped, %d failed", js.Written, js.Exists, js.Skipped, js.Failed)},
				{"compaction", fmt.Sprintf("%d jobs examined, %d runs, %d events hidden", co.Jobs, co.Runs, co.Events)},
				{"merge", fmt.Sprintf("%d clusters, %d memories superseded", m.Clusters, m.Superseded)},
				{"promotion", fmt.Sprintf("%d evaluated, %d promoted, %d superseded", p.Evaluated, p.Promoted, p.Superseded)},
			})
		},
	}
	run.Flags().StringArrayVar(&tasks, "task", nil, "job_summaries, compaction, merge or promotion (repeatable; default all)")
	cmd.AddCommand(run)
	return cmd
}
