// Package cli implements the `strata` command. Main is testable: it takes its arguments,
// environment and output streams, and returns the exit code.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
)

// app is the state every command shares.
type app struct {
	url, key, output string
	getenv           func(string) string
	out, errOut      io.Writer
}

// apiKey is --api-key, or STRATA_API_KEY when the flag is not given. The environment is read
// here rather than as the flag's default, so that --help never prints the secret.
func (a *app) apiKey() string {
	if a.key != "" {
		return a.key
	}
	return a.getenv("STRATA_API_KEY")
}

func (a *app) client() (*client.Client, error) {
	key := a.apiKey()
	if key == "" {
		return nil, errors.New("no API key: set STRATA_API_KEY or pass --api-key (an admin creates keys with `strata keys create`)")
	}
	return client.New(a.url, key, client.WithUserAgent("strata-cli/1")), nil
}

// Main runs the CLI and returns the process exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{getenv: getenv, out: stdout, errOut: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "error:", explain(err))
		return 1
	}
	return 0
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "strata",
		Short:         "Durable memory for long-running AI agents",
		Long:          "strata talks to a Strata server. Configure it with STRATA_URL and STRATA_API_KEY, or --url and --api-key.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	url := a.getenv("STRATA_URL")
	if url == "" {
		url = "http://localhost:8080"
	}
	root.PersistentFlags().StringVar(&a.url, "url", url, "Strata server URL (env STRATA_URL)")
	root.PersistentFlags().StringVar(&a.key, "api-key", "", "API key (from STRATA_API_KEY)")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if a.output != "table" && a.output != "json" {
			return fmt.Errorf("--output must be table or json, not %q", a.output)
		}
		return nil
	}
	root.AddCommand(a.keysCmd(), a.auditCmd())
	root.AddCommand(a.jobsCmd(), a.sessionsCmd(), a.memoriesCmd(), a.kvCmd(), a.contextCmd(), a.toolsCmd(), a.demoCmd())
	root.AddCommand(a.lifecycleCmds()...)
	root.AddCommand(a.gdprCmd(), a.eventsCmd())
	root.AddCommand(a.loadtestCmd())
	eval := a.evalCmd()
	eval.AddCommand(a.evalRetrievalCmd())
	root.AddCommand(eval)
	return root
}

// explain turns an error into a message that says what to do next.
func explain(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		hint := ""
		switch e.Status {
		case 401:
			hint = " — check STRATA_API_KEY (--api-key): it is missing, unknown or revoked"
		case 403:
			// The server names the key the call needs ("it needs a compliance key"); a 403
			// for other reasons (a restricted data subject) says why itself.
			if strings.Contains(e.Detail, "it needs ") {
				hint = " — use such a key (an admin creates one with `strata keys create --role <role>`)"
			}
		case 404:
			hint = " — nothing with that id exists in this key's org"
		case 409:
			hint = " — the resource changed meanwhile; read it again and retry with its current version"
		case 503:
			hint = " — a store is down; the server says to retry later (check /readyz)"
		}
		return e.Error() + hint
	}
	if strings.Contains(err.Error(), "connecting to Strata") {
		return err.Error() + " — is the server running? Start it with `make run`, or set STRATA_URL (--url)"
	}
	return err.Error()
}

// print writes v as JSON, or as a table of rows when the output is a table.
func (a *app) print(v any, header []string, rows [][]string) error {
	if a.output == "json" {
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}
