package app

import (
	"context"
	"fmt"
	"io"

	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/migrations"
)

// migrateStatus is `server migrate --status`: this build's newest migration, the schema's,
// what is pending and what is applied that this build does not have, with phases, and
// whether this build may run on the schema. It changes nothing; it fails (exit 1) when the
// build would be refused.
func migrateStatus(ctx context.Context, cfg config.Config, args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || args[0] != "--status" {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown migrate option %q (want --status)", args[0])
	}
	st, err := pg.ReadSchemaStatus(ctx, cfg.DatabaseURL, migrations.FS)
	if err != nil {
		return fmt.Errorf("reading the schema of %s: %w", pg.RedactURL(cfg.DatabaseURL), err)
	}
	fmt.Fprintf(stdout, "build:  %04d (newest migration this server embeds)\n", st.Build)
	fmt.Fprintf(stdout, "schema: %04d (newest migration applied)\n", st.Schema)
	for _, m := range st.Pending {
		fmt.Fprintf(stdout, "pending: %04d_%s (%s%s)\n", m.Version, m.Name, m.EffectivePhase(), requires(m.Requires))
	}
	for _, a := range st.Ahead {
		fmt.Fprintf(stdout, "ahead:   %04d_%s (%s%s), applied %s\n", a.Version, a.Name, a.Phase, requires(a.Requires), a.AppliedAt.UTC().Format("2006-01-02 15:04:05Z"))
	}
	if err := st.Check(); err != nil {
		fmt.Fprintf(stdout, "verdict: refused: %v\n", err)
		return err
	}
	switch {
	case len(st.Ahead) > 0:
		fmt.Fprintf(stdout, "verdict: compatible: the schema is ahead of this build by %d migration(s) it may run with\n", len(st.Ahead))
	case len(st.Pending) > 0:
		fmt.Fprintf(stdout, "verdict: compatible: %d migration(s) to apply (`server migrate`, or a server's start)\n", len(st.Pending))
	default:
		fmt.Fprintln(stdout, "verdict: up to date")
	}
	return nil
}

func requires(v int) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(", requires build >= %04d", v)
}
