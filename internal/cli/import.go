package cli

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/progress"
)

// importState is what `strata memories import` has acknowledged of a file, kept beside it
// so that a rerun resumes after the last batch the server committed.
type importState struct {
	File         string `json:"file"`
	Lines        int    `json:"lines_done"`
	Created      int    `json:"created"`
	Deduplicated int    `json:"deduplicated"`
	Failed       int    `json:"failed"`
}

func (a *app) memoriesImportCmd() *cobra.Command {
	var batch int
	var statePath string
	var restart bool
	cmd := &cobra.Command{Use: "import FILE.jsonl", Short: "Import memories from a JSON Lines file, in batches (resumable)", Args: cobra.ExactArgs(1),
		Long: "Each line is a memory as POST /v1/memories takes it ({\"text\": ..., \"kind\": ..., \"user_id\": ..., " +
			"\"metadata\": ...}). Lines are sent in batches (POST /v1/memories/batch), each under an Idempotency-Key made " +
			"from its content, and the lines acknowledged are recorded in FILE.jsonl.strata-import: an interrupted import " +
			"run again resumes after the last batch the server committed, and a batch that was committed but not recorded " +
			"is replayed, not written twice. Items the server refuses are reported with their line and problem.",
		Example: "  strata memories import corpus.jsonl --batch 500",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if batch < 1 || batch > client.MaxBatch {
				return fmt.Errorf("--batch must be 1-%d", client.MaxBatch)
			}
			path := args[0]
			if statePath == "" {
				statePath = path + ".strata-import"
			}
			total, err := countLines(path)
			if err != nil {
				return fmt.Errorf("reading %s: %w", path, err)
			}
			st := importState{File: path}
			if !restart {
				if b, err := os.ReadFile(statePath); err == nil {
					if err := json.Unmarshal(b, &st); err != nil {
						return fmt.Errorf("%s is not an import state file (delete it or pass --restart): %w", statePath, err)
					}
				}
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			prog := a.importProgress(int64(total))
			if st.Lines > 0 {
				fmt.Fprintf(a.errOut, "resuming %s after line %d (from %s)\n", path, st.Lines, statePath)
			}
			start := time.Now()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 0, 64<<10), 32<<20)
			line := 0
			var pending []client.NewMemory
			var lines []int
			var raw bytes.Buffer
			flush := func() error {
				if len(pending) == 0 {
					return nil
				}
				// The key names the batch by its first line and content: a rerun sends the
				// same key for the same lines.
				sum := sha256.Sum256(append(fmt.Appendf(nil, "%d\n", lines[0]), raw.Bytes()...))
				key := "import:" + hex.EncodeToString(sum[:16])
				ans, err := c.RememberBatch(cmd.Context(), pending, key)
				if err != nil {
					return fmt.Errorf("batch ending at line %d: %w (run the same command again to resume)", lines[len(lines)-1], err)
				}
				for _, it := range ans.Items {
					if it.Status == "failed" && it.Error != nil {
						fmt.Fprintf(a.errOut, "line %d refused: %s\n", lines[it.Index], it.Error.Detail)
					}
				}
				st.Lines = lines[len(lines)-1]
				st.Created += ans.Created
				st.Deduplicated += ans.Deduplicated
				st.Failed += ans.Failed
				if err := writeState(statePath, st); err != nil {
					return err
				}
				prog(st, len(pending))
				pending, lines = pending[:0], lines[:0]
				raw.Reset()
				return nil
			}
			for sc.Scan() {
				line++
				b := bytes.TrimSpace(sc.Bytes())
				if line <= st.Lines || len(b) == 0 {
					continue
				}
				var m client.NewMemory
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&m); err != nil {
					return fmt.Errorf("%s line %d is not a memory object: %w (fix the line and run again: the import resumes)", path, line, err)
				}
				pending = append(pending, m)
				lines = append(lines, line)
				raw.Write(b)
				raw.WriteByte('\n')
				if len(pending) == batch {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("reading %s: %w", path, err)
			}
			if err := flush(); err != nil {
				return err
			}
			el := time.Since(start)
			return a.print(st, []string{"FILE", "LINES", "CREATED", "DEDUPLICATED", "FAILED", "TIME"},
				[][]string{{path, fmt.Sprint(st.Lines), fmt.Sprint(st.Created), fmt.Sprint(st.Deduplicated), fmt.Sprint(st.Failed), el.Round(time.Millisecond).String()}})
		}}
	cmd.Flags().IntVar(&batch, "batch", 500, "memories per request (1-1000)")
	cmd.Flags().StringVar(&statePath, "state", "", "where progress is kept (default FILE.strata-import)")
	cmd.Flags().BoolVar(&restart, "restart", false, "ignore the state file and start from the first line")
	return cmd
}

// importProgress reports each acknowledged batch: a bar on a terminal, a plain line per
// batch otherwise (pipes and CI logs get no carriage returns).
func (a *app) importProgress(total int64) func(importState, int) {
	if progress.IsTerminal(a.errOut) && a.output != "json" {
		bar := a.newBar(total, "importing")
		return func(st importState, _ int) { bar.Set(int64(st.Lines)) }
	}
	return func(st importState, n int) {
		fmt.Fprintf(a.errOut, "imported %d/%d lines (+%d): created %d, deduplicated %d, failed %d\n",
			st.Lines, total, n, st.Created, st.Deduplicated, st.Failed)
	}
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, last := 0, byte('\n')
	buf := make([]byte, 256<<10)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if k > 0 {
			last = buf[k-1]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

// writeState replaces the state file durably (write, sync, rename).
func writeState(path string, st importState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("recording progress in %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
