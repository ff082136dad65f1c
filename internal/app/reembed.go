package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/semantic"
)

// reembed moves semantic memory to the embedder the environment now names (STRATA_EMBEDDER,
// STRATA_EMBEDDING_MODEL, STRATA_EMBEDDING_DIMS, ...), as the table owner, while running
// servers keep serving the old space (docs/semantic.md, "Changing the model"):
// fill embedding_next in resumable batches, build its HNSW index concurrently, then switch
// atomically. `server reembed cleanup` afterwards drops the old vectors. Restart the
// servers with the new settings after the switch.
func reembed(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, out io.Writer) error {
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to Postgres (check STRATA_DATABASE_URL): %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if len(args) > 2 && args[2] == "cleanup" {
		n, err := semantic.ClearNext(ctx, conn, 1000, cfg.AdminOrg)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "dropped the previous model's vectors of %d memories\n", n)
		return nil
	}
	emb, err := newEmbedder(cfg, nil)
	if err != nil {
		return err
	}
	sp := semantic.Space{Embedder: emb.Name(), Model: emb.Model(), Dims: emb.Dims()}
	fmt.Fprintf(out, "re-embedding memories with %s/%s (%d dims); servers keep serving the old model meanwhile\n", sp.Embedder, sp.Model, sp.Dims)
	start := time.Now()
	done := 0
	progress := func(ctx context.Context, texts []string) ([][]float32, error) {
		v, err := emb.Embed(ctx, texts)
		if err == nil {
			done += len(texts)
			fmt.Fprintf(out, "\r  step 1/3: %d memories embedded (%s)", done, time.Since(start).Round(time.Second))
		}
		return v, err
	}
	n, err := semantic.Reembed(ctx, conn, sp, progress, 256, cfg.AdminOrg)
	fmt.Fprintln(out)
	if err != nil {
		return fmt.Errorf("re-embedding stopped after %d memories (run `server reembed` again to resume): %w", n, err)
	}
	fmt.Fprintln(out, "  step 2/3: building the new HNSW index (concurrently: writes go on)")
	if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '1GB'"); err != nil {
		log.Warn("could not raise maintenance_work_mem for the index build", "err", err)
	}
	if err := semantic.EnsureIndex(ctx, conn, "embedding_next", sp.Dims, true); err != nil {
		return fmt.Errorf("building the new index (run `server reembed` again to resume): %w", err)
	}
	fmt.Fprintln(out, "  step 3/3: switching atomically (writes wait a moment)")
	if err := semantic.SwitchSpace(ctx, conn, sp, emb.Embed, cfg.AdminOrg); err != nil {
		return fmt.Errorf("switching to the new model: %w", err)
	}
	fmt.Fprintf(out, "done in %s: restart the servers with the new STRATA_EMBEDDER settings, then run `server reembed cleanup`\n",
		time.Since(start).Round(time.Second))
	return nil
}
