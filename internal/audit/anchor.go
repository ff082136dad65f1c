package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/service"
)

// An Anchor is a signed statement of an org's chain head: "at At, the chain of OrgID ended
// at Seq with hash HeadHash", signed by the key KeyID names. Published outside Strata (the
// anchor file sink), anchors let anyone holding the public key check an export of the audit
// log without trusting the database: a record edited, removed or re-chained before Seq no
// longer matches the anchor, and the signature cannot be recomputed without the private key.
type Anchor struct {
	ID        int64     `json:"id,omitempty" doc:"Position in the org's list of anchors (absent in the file sink)."`
	OrgID     string    `json:"org_id"`
	Seq       int64     `json:"seq" doc:"The last chained record the anchor covers."`
	HeadHash  string    `json:"head_hash" doc:"Hex hash of record seq (empty for an empty chain)."`
	At        time.Time `json:"at"`
	KeyID     string    `json:"key_id" doc:"First 8 bytes of SHA-256 of the Ed25519 public key, hex."`
	Signature string    `json:"signature" doc:"Ed25519 signature (base64) of the anchor's signed message (docs/compliance.md)."`
}

// message is what an anchor's signature covers: a versioned line per field.
func (a Anchor) message() []byte {
	return []byte("strata-audit-anchor-v1\n" + a.OrgID + "\n" + strconv.FormatInt(a.Seq, 10) + "\n" + a.HeadHash + "\n" +
		a.At.UTC().Format(time.RFC3339Nano) + "\n" + a.KeyID + "\n")
}

// Check verifies a's signature with the keyring's key of a.KeyID.
func (a Anchor) Check(keys Keyring) error {
	pub, ok := keys[a.KeyID]
	if !ok {
		return fmt.Errorf("anchor %s/%d is signed by key %s, which is not among the public keys given", a.OrgID, a.Seq, a.KeyID)
	}
	sig, err := base64.StdEncoding.DecodeString(a.Signature)
	if err != nil || !ed25519.Verify(pub, a.message(), sig) {
		return fmt.Errorf("anchor %s/%d: the signature does not verify (the anchor was altered or forged)", a.OrgID, a.Seq)
	}
	return nil
}

// Signer signs anchors with an Ed25519 key.
type Signer struct {
	priv ed25519.PrivateKey
	id   string
}

// NewSigner signs with priv.
func NewSigner(priv ed25519.PrivateKey) *Signer {
	return &Signer{priv: priv, id: KeyID(priv.Public().(ed25519.PublicKey))}
}

// KeyID names the signer's public key.
func (s *Signer) KeyID() string { return s.id }

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.priv.Public().(ed25519.PublicKey) }

// Sign fills a's KeyID and Signature.
func (s *Signer) Sign(a Anchor) Anchor {
	a.At = a.At.UTC().Truncate(time.Microsecond) // what Postgres keeps
	a.KeyID = s.id
	a.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(s.priv, a.message()))
	return a
}

// AnchorOrg signs org's current chain head in tx (which runs for org) and stores the
// anchor. With onlyNew it does nothing (ok false) when the chain is empty or has not grown
// since org's newest anchor. Chain pending records first (ChainOrg) to cover them.
func AnchorOrg(ctx context.Context, tx pgx.Tx, s *Signer, org string, now time.Time, onlyNew bool) (Anchor, bool, error) {
	var seq int64
	var head []byte
	err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_chain_heads WHERE org_id = $1`, org).Scan(&seq, &head)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Anchor{}, false, pg.Interpret(err)
	}
	if onlyNew {
		var last int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM audit_anchors WHERE org_id = $1`, org).Scan(&last); err != nil {
			return Anchor{}, false, pg.Interpret(err)
		}
		if seq == 0 || seq <= last {
			return Anchor{}, false, nil
		}
	}
	a := s.Sign(Anchor{OrgID: org, Seq: seq, HeadHash: hex.EncodeToString(head), At: now})
	sig, _ := base64.StdEncoding.DecodeString(a.Signature)
	if err := tx.QueryRow(ctx, `INSERT INTO audit_anchors (org_id, seq, head_hash, at, key_id, signature)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, org, seq, head, a.At, a.KeyID, sig).Scan(&a.ID); err != nil {
		return Anchor{}, false, pg.Interpret(err)
	}
	return a, true, nil
}

const anchorCols = `id, org_id, seq, encode(head_hash, 'hex'), at, key_id, encode(signature, 'base64')`

func scanAnchor(r pgx.CollectableRow) (Anchor, error) {
	var a Anchor
	err := r.Scan(&a.ID, &a.OrgID, &a.Seq, &a.HeadHash, &a.At, &a.KeyID, &a.Signature)
	return a, err
}

// ListAnchors returns org's anchors newest first, those with id below before (0: from the
// newest).
func ListAnchors(ctx context.Context, q pg.DBTX, org string, before int64, limit int) ([]Anchor, error) {
	rows, err := q.Query(ctx, `SELECT `+anchorCols+` FROM audit_anchors
		WHERE org_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, org, before, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	as, err := pgx.CollectRows(rows, scanAnchor)
	return as, pg.Interpret(err)
}

// AnchorSink appends anchors as JSON lines to a file an operator ships elsewhere.
type AnchorSink struct {
	mu   sync.Mutex
	path string
}

// NewAnchorSink appends to path ("" : a sink that drops anchors).
func NewAnchorSink(path string) *AnchorSink { return &AnchorSink{path: path} }

// Write appends as, one JSON line each (without the database id), and syncs the file.
func (s *AnchorSink) Write(as ...Anchor) error {
	if s == nil || s.path == "" || len(as) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("STRATA_AUDIT_ANCHOR_FILE: %w", err)
	}
	var buf []byte
	for _, a := range as {
		a.ID = 0
		b, err := json.Marshal(a)
		if err != nil {
			f.Close()
			return err
		}
		buf = append(append(buf, b...), '\n')
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return fmt.Errorf("STRATA_AUDIT_ANCHOR_FILE: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("STRATA_AUDIT_ANCHOR_FILE: %w", err)
	}
	return f.Close()
}

// Anchorer signs the chain heads of every org that grew since its last anchor, every
// interval, storing each anchor and appending it to the sink. Any number of replicas may
// run one: two anchors of the same head are harmless. There is no webhook/outbox event
// (audit.anchor) yet: Strata has no webhook machinery; the sink is the way out.
type Anchorer struct {
	Pool     *pgxpool.Pool
	Signer   *Signer
	Sink     *AnchorSink
	Log      *slog.Logger
	Interval time.Duration
	ExtraOrg string // an org to anchor even without API keys (the bootstrap admin's)
	Now      func() time.Time

	service.StartStop
	// TestSignals fire in tests (no-ops otherwise): Anchored after each periodic pass with
	// the number of anchors it signed.
	TestSignals struct{ Anchored service.TestSignal[int] }
}

// AnchorNow chains org's pending records and signs its head (onlyNew: unless unchanged),
// stores the anchor and appends it to the sink.
func (a *Anchorer) AnchorNow(ctx context.Context, org string, onlyNew bool) (Anchor, bool, error) {
	if _, err := ChainOrg(ctx, a.Pool, org); err != nil {
		return Anchor{}, false, err
	}
	var an Anchor
	var ok bool
	err := pg.InOrgTx(ctx, a.Pool, org, func(tx pgx.Tx) error {
		var err error
		an, ok, err = AnchorOrg(ctx, tx, a.Signer, org, a.now(), onlyNew)
		return err
	})
	if err != nil || !ok {
		return an, ok, err
	}
	return an, true, a.Sink.Write(an)
}

func (a *Anchorer) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// RunOnce anchors every org whose chain grew; it returns how many anchors it made.
func (a *Anchorer) RunOnce(ctx context.Context) (int, error) {
	rows, err := a.Pool.Query(ctx, `SELECT DISTINCT org_id FROM api_keys UNION SELECT $1`, a.ExtraOrg)
	if err != nil {
		return 0, pg.Interpret(err)
	}
	orgs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, pg.Interpret(err)
	}
	n := 0
	for _, org := range orgs {
		if org == "" {
			continue
		}
		_, ok, err := a.AnchorNow(ctx, org, true)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// Start runs the anchorer until Stop (with no interval it only answers AnchorNow).
func (a *Anchorer) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := a.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		service.Every(ctx, a.Interval, func(ctx context.Context) {
			n, err := a.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				a.Log.Warn("audit anchoring failed; will retry (check STRATA_AUDIT_ANCHOR_FILE is writable)", "err", err)
			}
			a.TestSignals.Anchored.Signal(n)
		})
	}()
	return nil
}
