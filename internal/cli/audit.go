package cli

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-mem/strata/client"
	"github.com/strata-mem/strata/internal/audit"
)

// Outside checks of the audit log (docs/compliance.md, "Checking the log from outside"):
// `strata audit export` writes the org's chain as JSON lines, `strata audit verify
// --anchors FILE --public-key K` checks such an export (or one it fetches) against anchors
// kept outside Strata, with no database access, and `strata audit keygen` makes keys.

// withOfflineVerify adds the offline flags to the server-side verify command: with
// --anchors it checks an export against them instead of asking the server.
func (a *app) withOfflineVerify(verify *cobra.Command) *cobra.Command {
	var anchorsFile, exportFile string
	var pubKeys []string
	serverSide := verify.RunE
	verify.Short = "Verify the audit log's hash chain (on the server, or offline against signed anchors); exits 1 when it is broken"
	verify.Long = "Without --anchors the server walks its own chain (GET /v1/audit/verify).\n\n" +
		"With --anchors FILE --public-key K the check runs here, without database access: the records (from --export FILE,\n" +
		"or fetched from GET /v1/audit/export with a compliance key) are re-hashed and compared with anchors signed by K.\n" +
		"It reports intact, unanchored (records newer than the newest anchor: their removal could not be detected) or broken."
	verify.Flags().StringVar(&anchorsFile, "anchors", "", "anchor file (JSON lines, as STRATA_AUDIT_ANCHOR_FILE writes them)")
	verify.Flags().StringArrayVar(&pubKeys, "public-key", nil, "Ed25519 public key anchors are signed with: base64 or a PEM file (repeat for rotated keys)")
	verify.Flags().StringVar(&exportFile, "export", "", "export file from `strata audit export` (default: fetch from the server)")
	verify.RunE = func(cmd *cobra.Command, args []string) error {
		if anchorsFile == "" {
			if exportFile != "" || len(pubKeys) > 0 {
				return errors.New("--export and --public-key need --anchors FILE (the anchors kept outside Strata)")
			}
			return serverSide(cmd, args)
		}
		return a.verifyOffline(cmd.Context(), anchorsFile, exportFile, pubKeys)
	}
	return verify
}

func (a *app) verifyOffline(ctx context.Context, anchorsFile, exportFile string, pubKeys []string) error {
	if len(pubKeys) == 0 {
		return errors.New("--public-key is required with --anchors: the Ed25519 public key the server logs at start (public_key) or its PEM file")
	}
	keys := audit.Keyring{}
	for _, k := range pubKeys {
		p, err := audit.ParsePublicKey(k)
		if err != nil {
			return fmt.Errorf("--public-key: %w", err)
		}
		keys[audit.KeyID(p)] = p
	}
	f, err := os.Open(anchorsFile)
	if err != nil {
		return fmt.Errorf("--anchors: %w (give the file STRATA_AUDIT_ANCHOR_FILE wrote, or a copy of it)", err)
	}
	anchors, err := audit.ReadAnchors(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("--anchors %s: %w", anchorsFile, err)
	}
	var next func() (audit.ChainRecord, error)
	if exportFile != "" {
		ef, err := os.Open(exportFile)
		if err != nil {
			return fmt.Errorf("--export: %w (write one with `strata audit export > FILE`)", err)
		}
		defer ef.Close()
		next = audit.NewExportReader(bufio.NewReaderSize(ef, 1<<20)).Next
	} else {
		c, err := a.client()
		if err != nil {
			return fmt.Errorf("%w; or pass --export FILE for a check without the server", err)
		}
		next = a.fetchChain(ctx, c)
	}
	prog := a.progress("verifying")
	rep, err := audit.VerifyExport(next, anchors, keys, prog.step)
	prog.done()
	if err != nil {
		return err
	}
	where, newest := "", ""
	if rep.FirstBroken != nil {
		where = fmt.Sprintf("record %d: %s", rep.FirstBroken.Seq, rep.FirstBroken.Reason)
	}
	if rep.NewestAnchor != nil {
		newest = fmt.Sprintf("%d @ %s", rep.NewestAnchor.Seq, rep.NewestAnchor.At.UTC().Format(time.RFC3339))
	}
	if err := a.print(rep, []string{"STATUS", "ORG", "CHECKED", "ANCHORS", "NEWEST_ANCHOR", "UNANCHORED", "FIRST_BROKEN"},
		[][]string{{rep.Status, rep.OrgID, strconv.FormatInt(rep.Checked, 10), strconv.Itoa(rep.Anchors), newest,
			strconv.FormatInt(rep.Unanchored, 10), where}}); err != nil {
		return err
	}
	switch rep.Status {
	case audit.StatusBroken:
		return fmt.Errorf("the audit log does not match its signed anchors at %s; keep this export and the anchor file as evidence", where)
	case audit.StatusUnanchored:
		fmt.Fprintf(a.errOut, "note: %d record(s) are newer than the newest anchor and cannot be proven complete; "+
			"anchor them (POST /v1/audit/anchors) and verify again with the updated anchor file\n", rep.Unanchored)
	}
	return nil
}

// fetchChain pages through GET /v1/audit/export.
func (a *app) fetchChain(ctx context.Context, c *client.Client) func() (audit.ChainRecord, error) {
	var buf []audit.ChainRecord
	cursor, done := "", false
	return func() (audit.ChainRecord, error) {
		for len(buf) == 0 {
			if done {
				return audit.ChainRecord{}, io.EOF
			}
			q := url.Values{"limit": {"1000"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			var page struct {
				Items      []audit.ChainRecord `json:"items"`
				NextCursor string              `json:"next_cursor"`
			}
			if _, err := c.Do(ctx, client.Call{Method: http.MethodGet, Path: "/v1/audit/export", Query: q}, &page); err != nil {
				return audit.ChainRecord{}, err
			}
			buf, cursor = page.Items, page.NextCursor
			done = cursor == ""
		}
		r := buf[0]
		buf = buf[1:]
		return r, nil
	}
}

func (a *app) auditExportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "export",
		Short: "Write the org's audit chain as JSON lines (for `strata audit verify --export`)",
		Long: "Writes every chained record of the caller's org, in seq order, one JSON object per line, exactly as its\n" +
			"hash covers it (GET /v1/audit/export). Redirect it to a file: strata audit export > audit.jsonl",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			next := a.fetchChain(cmd.Context(), c)
			w := bufio.NewWriterSize(a.out, 1<<16)
			enc := json.NewEncoder(w)
			prog := a.progress("exporting")
			for {
				r, err := next()
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				if err := enc.Encode(r); err != nil {
					return err
				}
				prog.step(r.Seq)
			}
			prog.done()
			return w.Flush()
		},
	}
}

func (a *app) auditKeygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Print a new anchor signing key and pseudonym key (for STRATA_AUDIT_SIGNING_KEY, STRATA_PSEUDONYM_KEY)",
		RunE: func(*cobra.Command, []string) error {
			priv, seed := audit.NewSigningKey()
			pub := priv.Public().(ed25519.PublicKey)
			fmt.Fprintf(a.out, "STRATA_AUDIT_SIGNING_KEY=%s\n", seed)
			fmt.Fprintf(a.out, "STRATA_PSEUDONYM_KEY=%s\n", audit.NewPseudonymKey())
			fmt.Fprintf(a.out, "# public key (for --public-key and STRATA_AUDIT_VERIFY_KEYS after a rotation): %s\n",
				audit.EncodePublicKey(pub))
			return nil
		},
	}
}

// progress reports records processed: a rewritten line on a terminal, a plain line every
// 10000 records in a pipe, nothing for JSON output.
type progressLine struct {
	w     io.Writer
	what  string
	tty   bool
	n     int64
	last  time.Time
	shown bool
}

func (a *app) progress(what string) *progressLine {
	p := &progressLine{w: a.errOut, what: what}
	if a.output == "json" {
		p.w = io.Discard
	}
	if f, ok := a.errOut.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progressLine) step(seq int64) {
	p.n++
	switch {
	case p.tty:
		if time.Since(p.last) > 100*time.Millisecond {
			p.last = time.Now()
			fmt.Fprintf(p.w, "\r%s: %d records (seq %d)", p.what, p.n, seq)
			p.shown = true
		}
	case p.n%10000 == 0:
		fmt.Fprintf(p.w, "%s: %d records (seq %d)\n", p.what, p.n, seq)
	}
}

func (p *progressLine) done() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
