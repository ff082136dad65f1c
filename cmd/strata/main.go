// Command strata is Strata's CLI: keys, sessions, jobs, memories, key-value, GDPR, audit,
// policies, the media-job demo and the load generator. It reads STRATA_URL and
// STRATA_API_KEY (or --url and --api-key).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/strata-mem/strata/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
