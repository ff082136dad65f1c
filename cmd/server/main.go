// Command server runs the Strata API: `server` serves (applying migrations first),
// `server migrate` only migrates. All configuration comes from the environment.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-mem/strata/internal/app"
)

func main() {
	// The first SIGTERM or SIGINT starts the graceful shutdown (a drain, docs/reliability.md);
	// a second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := app.Run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "strata:", err)
		os.Exit(1)
	}
}
