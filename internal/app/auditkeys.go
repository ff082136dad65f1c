package app

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-mem/strata/internal/audit"
	"github.com/strata-mem/strata/internal/config"
)

// auditKeys are the audit log's secrets, read from the environment (or the files it names)
// and never from the database: the pseudonym key and the anchor signing key, with the
// public keys anchors verify with (docs/compliance.md, "Keys").
type auditKeys struct {
	pseudo   *audit.Pseudonymizer
	signer   *audit.Signer
	keyring  audit.Keyring
	anchorer *audit.Anchorer
}

// loadAuditKeys reads the keys cfg names. In development mode a missing signing key is
// generated and printed once (like the admin key), and a missing pseudonym key falls back
// to the one older releases stored in the database (or a generated one); production
// requires both (config.Validate).
func loadAuditKeys(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log *slog.Logger, stdout io.Writer) (*auditKeys, error) {
	ak := &auditKeys{}
	if cfg.PseudonymKey != "" {
		k, err := audit.ReadSecret(cfg.PseudonymKey)
		if err != nil {
			return nil, fmt.Errorf("STRATA_PSEUDONYM_KEY: %w", err)
		}
		ak.pseudo = audit.NewPseudonymizer(k)
	} else {
		p, err := audit.LoadPseudonymizer(ctx, pool)
		if err != nil {
			k := audit.NewPseudonymKey()
			fmt.Fprintf(stdout, "STRATA_PSEUDONYM_KEY was not set; generated a pseudonym key for this run (development mode):\n  %s\n", k)
			p = audit.NewPseudonymizer(k)
		} else {
			log.Warn("development mode: audit pseudonyms use the key stored in the database; set STRATA_PSEUDONYM_KEY (required with STRATA_ENV=production)")
		}
		ak.pseudo = p
	}
	if cfg.PseudonymPreviousKeys != "" {
		var prev []string
		for _, s := range strings.Split(cfg.PseudonymPreviousKeys, ",") {
			k, err := audit.ReadSecret(s)
			if err != nil {
				return nil, fmt.Errorf("STRATA_PSEUDONYM_PREVIOUS_KEYS: %w", err)
			}
			prev = append(prev, k)
		}
		ak.pseudo = ak.pseudo.WithPrevious(prev...)
	}
	if cfg.Env == "production" {
		var stored int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM strata_settings WHERE name = 'audit_hmac_key'`).Scan(&stored); err == nil && stored > 0 {
			log.Warn("the database still holds the pseudonym key of an older release (strata_settings.audit_hmac_key); " +
				"production does not use it: put it in STRATA_PSEUDONYM_KEY or STRATA_PSEUDONYM_PREVIOUS_KEYS if audit " +
				"records were written with it, then delete it as the database owner (docs/compliance.md, \"Keys\")")
		}
	}

	var priv ed25519.PrivateKey
	if cfg.AuditSigningKey != "" {
		k, err := audit.ParsePrivateKey(cfg.AuditSigningKey)
		if err != nil {
			return nil, fmt.Errorf("STRATA_AUDIT_SIGNING_KEY: %w", err)
		}
		priv = k
	} else {
		var seed string
		priv, seed = audit.NewSigningKey()
		fmt.Fprintf(stdout, "STRATA_AUDIT_SIGNING_KEY was not set; generated an anchor signing key for this run (development mode):\n  %s\n", seed)
	}
	ak.signer = audit.NewSigner(priv)
	ak.keyring = audit.NewKeyring(ak.signer.Public())
	if cfg.AuditVerifyKeys != "" {
		more, err := audit.ParseKeyring(cfg.AuditVerifyKeys)
		if err != nil {
			return nil, fmt.Errorf("STRATA_AUDIT_VERIFY_KEYS: %w", err)
		}
		for id, k := range more {
			ak.keyring[id] = k
		}
	}
	log.Info("audit anchors are signed", "key_id", ak.signer.KeyID(), "public_key", audit.EncodePublicKey(ak.signer.Public()),
		"verify_keys", len(ak.keyring))
	ak.anchorer = &audit.Anchorer{Pool: pool, Signer: ak.signer, Sink: audit.NewAnchorSink(cfg.AuditAnchorFile), Log: log,
		Interval: cfg.AuditAnchorInterval, ExtraOrg: cfg.AdminOrg, Now: time.Now}
	return ak, nil
}
