package cli

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
)

// `strata memories list`: GET /v1/memories (browse, Mem0's get_all), paged through the
// cursor until --limit memories or the last page.
func (a *app) memoriesListCmd() *cobra.Command {
	var sc client.Scope
	var kind, trust, prov, key, after, before string
	var limit, pageSize int
	var asJSON bool
	cmd := &cobra.Command{Use: "list", Short: "Browse memories newest first (filters: scope, kind, trust, provenance, time)",
		Example: "  strata memories list --user u1\n  strata memories list --user u1 --provenance extracted --json\n" +
			"  strata memories list --kind preference --created-after 2026-12-01T00:00:00Z --limit 50",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if asJSON {
				a.output = "json"
			}
			q := url.Values{}
			for k, v := range map[string]string{"user_id": sc.UserID, "agent_id": sc.AgentID, "session_id": sc.SessionID,
				"kind": kind, "trust": trust, "provenance": prov, "key_id": key, "created_after": after, "created_before": before} {
				if v != "" {
					q.Set(k, v)
				}
			}
			all := []client.Memory{}
			cursor := ""
			for {
				size := pageSize
				if limit > 0 && limit-len(all) < size {
					size = limit - len(all)
				}
				q.Set("limit", strconv.Itoa(size))
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				var p struct {
					Items      []client.Memory `json:"items"`
					NextCursor string          `json:"next_cursor"`
				}
				if _, err := c.Do(cmd.Context(), client.Call{Method: http.MethodGet, Path: "/v1/memories", Query: q}, &p); err != nil {
					return err
				}
				all = append(all, p.Items...)
				if cursor = p.NextCursor; cursor == "" || (limit > 0 && len(all) >= limit) {
					break
				}
			}
			rows := [][]string{}
			for _, m := range all {
				rows = append(rows, []string{m.ID, m.Kind, m.Trust, m.UserID, ts(m.ValidFrom), oneLineText(m.Text, 100)})
			}
			return a.print(all, []string{"ID", "KIND", "TRUST", "USER", "WRITTEN", "TEXT"}, rows)
		}}
	addScope(cmd, &sc)
	cmd.Flags().StringVar(&kind, "kind", "", "only this kind (fact, preference, job, case, ...)")
	cmd.Flags().StringVar(&trust, "trust", "", "only this trust level (verified, user_stated, agent_inferred, tool_output, consolidated, extracted)")
	cmd.Flags().StringVar(&prov, "provenance", "", "extracted (from turns by the LLM), consolidated (by the worker) or written (through the API)")
	cmd.Flags().StringVar(&key, "key", "", "only versions written by this API key id")
	cmd.Flags().StringVar(&after, "created-after", "", "only versions written after this RFC 3339 time")
	cmd.Flags().StringVar(&before, "created-before", "", "only versions written before this RFC 3339 time")
	cmd.Flags().IntVar(&limit, "limit", 0, "stop after this many memories (0: every page)")
	cmd.Flags().IntVar(&pageSize, "page-size", 100, "memories per request (1-1000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (same as -o json)")
	_ = cmd.RegisterFlagCompletionFunc("provenance", cobra.FixedCompletions([]string{"extracted", "consolidated", "written"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// oneLineText cuts s to n runes on one line.
func oneLineText(s string, n int) string {
	r := []rune(s)
	for i, c := range r {
		if c == '\n' || c == '\r' || c == '\t' {
			r[i] = ' '
		}
	}
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return string(r)
}
