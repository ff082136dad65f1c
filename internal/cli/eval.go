package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/internal/retrievaleval"
)

// evalRetrievalCmd is `strata eval retrieval`: the labelled retrieval set against the server.
func (a *app) evalRetrievalCmd() *cobra.Command {
	var data string
	var limit int
	var asJSON, keep bool
	cmd := &cobra.Command{Use: "retrieval --data FILE",
		Short: "Measure search and context retrieval against labelled conversations (recall, hit, NDCG, MRR per category, beside BM25)",
		Long: "Writes each conversation's turns as memories (POST /v1/memories/batch, one user id per conversation unique to " +
			"the run), asks each question through POST /v1/memories/search (top 10) and POST /v1/context (1k, 2k, 4k tokens), " +
			"and scores the answers against the evidence turns, per category, beside an Okapi BM25 baseline over the same " +
			"texts. The memories written are deleted at the end unless --keep. --data takes the native layout " +
			"(eval/retrieval/conversations.json), LoCoMo's or LongMemEval's; the layout is detected. See docs/evaluation.md.",
		Example: "  strata eval retrieval --data eval/retrieval/conversations.json\n" +
			"  strata eval retrieval --data locomo10.json --limit-conversations 2 --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if data == "" {
				return fmt.Errorf("--data is required (e.g. --data eval/retrieval/conversations.json)")
			}
			if limit < 0 {
				return fmt.Errorf("--limit-conversations must be 0 (all) or more, not %d", limit)
			}
			if asJSON {
				a.output = "json"
			}
			ds, layout, err := retrievaleval.Load(data)
			if err != nil {
				return fmt.Errorf("%w (the layouts are described in docs/evaluation.md)", err)
			}
			ds = ds.Subset(limit)
			c, err := a.client()
			if err != nil {
				return err
			}
			bar := a.newBar(int64(len(ds.Questions)), "questions")
			log := bar.Writer(a.errOut)
			rep, err := retrievaleval.Run(cmd.Context(), c, ds, retrievaleval.Options{Keep: keep,
				Progress: func(done, _ int) { bar.Set(int64(done)) },
				Log: func(f string, args ...any) {
					if a.output != "json" {
						fmt.Fprintf(log, f+"\n", args...)
					}
				}})
			bar.Finish()
			if rep.Cleanup != "" && a.output != "json" {
				fmt.Fprintln(a.errOut, "cleanup:", rep.Cleanup)
			}
			if err != nil {
				return fmt.Errorf("%w (the memories written so far are removed; run again)", err)
			}
			rep.Dataset, rep.Layout = data, layout
			if a.output == "json" {
				return a.print(rep, nil, nil)
			}
			return printRetrieval(a, rep)
		}}
	cmd.Flags().StringVar(&data, "data", "", "the labelled conversations (native layout, LoCoMo or LongMemEval JSON)")
	cmd.Flags().IntVar(&limit, "limit-conversations", 0, "use only the first N conversations (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON (same as -o json)")
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the memories written in place (under user ids eval-<run>-<conversation>)")
	cmd.Flags().StringVar(&a.key, "key", "", "API key (same as --api-key; from STRATA_API_KEY)")
	return cmd
}

func printRetrieval(a *app, rep retrievaleval.Report) error {
	fmt.Fprintf(a.out, "%s (%s): %d conversations, %d turns, %d questions against %s\n", rep.Dataset, rep.Layout,
		rep.Conversations, rep.Turns, rep.Questions, rep.Server)
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CATEGORY\tN\tR@5\tR@10\tHIT@10 (95% CI)\tNDCG@10\tMRR\t|\tBM25 R@5\tR@10\tHIT@10\tNDCG@10\tMRR")
	for i, s := range rep.Strata {
		b := rep.BM25[i]
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f (%.2f-%.2f)\t%.3f\t%.3f\t|\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", s.Category, s.Questions,
			s.RecallAt5, s.RecallAt10, s.HitAt10, s.HitAt10Lo, s.HitAt10Hi, s.NDCG10, s.MRR,
			b.RecallAt5, b.RecallAt10, b.HitAt10, b.NDCG10, b.MRR)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ab := rep.Abstention
	fmt.Fprintf(a.out, "\nabstention: %d questions, %.0f%% answered with nothing; top score mean %.3f, max %.3f (answerable questions' top score mean %.3f)\n",
		ab.Questions, 100*ab.EmptyFraction, ab.TopScoreMean, ab.TopScoreMax, ab.AnsweredTopScoreMean)
	fmt.Fprintln(a.out)
	tw = tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTEXT BUDGET\tEVIDENCE COVERED\tTOKENS/QUERY\tP50\tP99")
	for _, c := range rep.Context {
		fmt.Fprintf(tw, "%d\t%.3f\t%.0f\t%.1f ms\t%.1f ms\n", c.Budget, c.Coverage, c.TokensMean, c.P50ms, c.P99ms)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "\nsearch latency p50 %.1f ms, p99 %.1f ms; ingest %.1f s; total %.1f s; %s\n",
		rep.SearchP50ms, rep.SearchP99ms, rep.IngestSeconds, rep.ElapsedSeconds, rep.Cleanup)
	return nil
}
