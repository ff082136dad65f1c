-- Webhook secret rotation with an overlap (issue 41; internal/webhooks RotateSecret,
-- docs/events.md). POST /v1/admin/webhooks/{id}/rotate-secret moves the current secret here
-- and seals the new one in secret_seal; until previous_secret_expires_at every delivery is
-- signed with both (two signatures in webhook-signature), so a receiver switches secrets
-- without refusing a delivery. Sealed like secret_seal (same key, same associated data).
-- Both columns are set together or not at all.
ALTER TABLE webhook_subscriptions
  ADD COLUMN previous_secret_seal bytea,
  ADD COLUMN previous_secret_expires_at timestamptz,
  ADD CONSTRAINT webhook_subscriptions_previous_secret
    CHECK ((previous_secret_seal IS NULL) = (previous_secret_expires_at IS NULL));
