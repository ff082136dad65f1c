-- Webhooks (internal/webhooks, docs/events.md): per-org subscriptions to outbox events,
-- the dispatcher's cursor into each org's outbox, and one delivery per (subscription, event)
-- with its attempts. Deliveries run on River; a delivery is delivered, pending (a retry is
-- due) or dead (its attempts ran out; POST .../redeliver revives it). Bodies hold the event
-- as it was sent (ids and pseudonyms only). The signing secret is stored sealed (AES-GCM
-- with a key the server derives from its pseudonym key), never in the clear.
CREATE TABLE webhook_subscriptions (
  org_id      text NOT NULL CHECK (org_id <> ''),
  id          text NOT NULL,
  url         text NOT NULL,
  event_types text[] NOT NULL,
  secret_seal bytea NOT NULL,
  active      boolean NOT NULL DEFAULT true,
  description text NOT NULL DEFAULT '',
  version     bigint NOT NULL DEFAULT 1,
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL,
  PRIMARY KEY (org_id, id)
);
SELECT strata_enable_rls('webhook_subscriptions');

-- The last outbox seq the dispatcher fanned out into deliveries, per org. A replica locks
-- the row (FOR UPDATE SKIP LOCKED) while it dispatches, so one org's events are fanned out
-- by one replica at a time, in order, and exactly once (the deliveries and the cursor commit
-- together).
CREATE TABLE webhook_cursors (
  org_id     text NOT NULL CHECK (org_id <> ''),
  seq        bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id)
);
SELECT strata_enable_rls('webhook_cursors');

CREATE TABLE webhook_deliveries (
  org_id           text NOT NULL CHECK (org_id <> ''),
  id               uuid NOT NULL,
  subscription_id  text NOT NULL,
  event_id         text NOT NULL,
  event_seq        bigint NOT NULL,
  event_type       text NOT NULL,
  body             text NOT NULL,
  status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
  attempts         int NOT NULL DEFAULT 0,
  last_status_code int,
  last_error       text,
  last_latency_ms  int,
  lease_until      timestamptz,
  retry_at         timestamptz,
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  delivered_at     timestamptz,
  PRIMARY KEY (org_id, id),
  UNIQUE (org_id, subscription_id, event_id),
  FOREIGN KEY (org_id, subscription_id) REFERENCES webhook_subscriptions (org_id, id) ON DELETE CASCADE
);
SELECT strata_enable_rls('webhook_deliveries');
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (org_id, subscription_id, id DESC);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (org_id, lease_until) WHERE status = 'pending';

CREATE TABLE webhook_attempts (
  org_id      text NOT NULL CHECK (org_id <> ''),
  id          bigint GENERATED ALWAYS AS IDENTITY,
  delivery_id uuid NOT NULL,
  attempt     int NOT NULL,
  status_code int,
  latency_ms  int NOT NULL,
  error       text,
  at          timestamptz NOT NULL,
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, delivery_id) REFERENCES webhook_deliveries (org_id, id) ON DELETE CASCADE
);
SELECT strata_enable_rls('webhook_attempts');
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (org_id, delivery_id, id);
