package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
)

func (a *app) keysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Manage API keys (admin)"}
	var org, role, name string
	create := &cobra.Command{
		Use:     "create",
		Short:   "Create an API key; its secret is shown once",
		Example: "  strata keys create --org acme --role agent --name media-bot",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			k, err := c.CreateKey(cmd.Context(), org, role, name)
			if err != nil {
				return err
			}
			if err := a.print(k, []string{"ID", "ORG", "ROLE", "KEY"}, [][]string{{k.ID, k.OrgID, k.Role, k.Secret}}); err != nil {
				return err
			}
			if a.output == "table" {
				fmt.Fprintln(a.errOut, "Store the key now: it is not shown again.")
			}
			return nil
		},
	}
	create.Flags().StringVar(&org, "org", "", "org of the key (default: your key's org)")
	create.Flags().StringVar(&role, "role", "agent", "agent, compliance or admin")
	create.Flags().StringVar(&name, "name", "", "a label for humans")
	_ = create.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"agent", "compliance", "admin"}, cobra.ShellCompDirectiveNoFileComp))

	list := &cobra.Command{
		Use:   "list",
		Short: "List API keys (never their secrets)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var all []client.Key
			cursor := ""
			for {
				p, err := c.ListKeys(cmd.Context(), org, cursor, 1000)
				if err != nil {
					return err
				}
				all = append(all, p.Items...)
				if cursor = p.NextCursor; cursor == "" {
					break
				}
			}
			rows := make([][]string, 0, len(all))
			for _, k := range all {
				state := "active"
				if k.RevokedAt != nil {
					state = "revoked " + k.RevokedAt.Format(time.RFC3339)
				}
				rows = append(rows, []string{k.ID, k.OrgID, k.Role, k.Name, k.Prefix + "…", state})
			}
			return a.print(all, []string{"ID", "ORG", "ROLE", "NAME", "PREFIX", "STATE"}, rows)
		},
	}
	list.Flags().StringVar(&org, "org", "", "org to list (bootstrap admin only; default your key's org)")

	revoke := &cobra.Command{
		Use:   "revoke KEY_ID",
		Short: "Revoke an API key (takes effect at once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			k, err := c.RevokeKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(k, []string{"ID", "ORG", "REVOKED"}, [][]string{{k.ID, k.OrgID, k.RevokedAt.Format(time.RFC3339)}})
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func (a *app) auditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Read and verify the audit log (compliance, admin)"}
	var f client.AuditFilter
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List audit records, oldest first",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.ListAudit(cmd.Context(), f, "", limit)
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(p.Items))
			for _, r := range p.Items {
				rows = append(rows, []string{strconv.FormatInt(r.ID, 10), r.At.Format(time.RFC3339), r.ActorKeyID, r.Action, r.EntityType, r.EntityID})
			}
			return a.print(p, []string{"ID", "AT", "ACTOR", "ACTION", "ENTITY", "ENTITY_ID"}, rows)
		},
	}
	list.Flags().StringVar(&f.Action, "action", "", "operation id, e.g. create-key")
	list.Flags().StringVar(&f.EntityType, "entity-type", "", "e.g. jobs, memories")
	list.Flags().StringVar(&f.EntityID, "entity-id", "", "")
	list.Flags().StringVar(&f.UserID, "user", "", "data subject (matched by pseudonym)")
	list.Flags().IntVar(&limit, "limit", 100, "records to show (max 1000)")

	verify := &cobra.Command{
		Use:   "verify",
		Short: "Verify the audit log's hash chain; exits 1 when it is broken",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.VerifyAudit(cmd.Context())
			if err != nil {
				return err
			}
			status, where := "ok", ""
			if !r.OK {
				status = "BROKEN"
				where = fmt.Sprintf("record %d: %s", r.FirstBroken.Seq, r.FirstBroken.Reason)
			}
			if err := a.print(r, []string{"CHAIN", "CHECKED", "PENDING", "FIRST_BROKEN"},
				[][]string{{status, strconv.FormatInt(r.Checked, 10), strconv.FormatInt(r.Unchained, 10), where}}); err != nil {
				return err
			}
			if !r.OK {
				return fmt.Errorf("the audit chain is broken at %s: the log was edited or records were removed", where)
			}
			return nil
		},
	}
	cmd.AddCommand(list, a.withOfflineVerify(verify), a.auditExportCmd(), a.auditKeygenCmd())
	return cmd
}
