package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/strata-mem/strata/internal/config"
	"github.com/strata-mem/strata/internal/partition"
)

// partitionTables is `server partition`: the online move of the big tables to the
// partitioned layout (internal/partition), with a progress bar on a terminal and plain
// lines in a pipe.
func partitionTables(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("partition", flag.ContinueOnError)
	fs.SetOutput(out)
	keep := fs.Bool("keep-old", false, "keep each old table as <table>_unpartitioned_old")
	batch := fs.Int("batch", 5000, "rows copied per transaction")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Partitions == 0 {
		return fmt.Errorf("STRATA_PARTITIONS is 0: set the partition count to move to (1..1024)")
	}
	start := time.Now()
	fmt.Fprintf(out, "moving %v to %d hash partitions by org_id; the service keeps serving\n", partition.Tables, cfg.Partitions)
	reps, err := partition.Move(ctx, cfg.DatabaseURL, partition.Options{
		Partitions: cfg.Partitions, Batch: *batch, KeepOld: *keep, Progress: out, Log: log,
	})
	for _, r := range reps {
		if r.Already {
			fmt.Fprintf(out, "  %s: already partitioned (%d partitions)\n", r.Table, r.Partitions)
			continue
		}
		fmt.Fprintf(out, "  %s: %d rows copied into %d partitions; swap took %s\n", r.Table, r.Copied, r.Partitions, r.SwapWait.Round(time.Millisecond))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "done in %s\n", time.Since(start).Round(time.Second))
	return nil
}
