package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/strata-mem/strata/internal/outbox"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Delivery is one event's delivery to one subscription, with its latest attempt.
type Delivery struct {
	ID             string            `json:"id"`
	SubscriptionID string            `json:"subscription_id"`
	EventID        string            `json:"event_id" doc:"The webhook-id header: the same on every attempt and redelivery, so receivers dedupe on it."`
	EventSeq       int64             `json:"event_seq" doc:"The event's seq in the org's stream (0 for a ping)."`
	EventType      string            `json:"event_type"`
	Status         string            `json:"status" enum:"pending,delivered,dead" doc:"pending: an attempt is due or running; delivered: a 2xx answer; dead: attempts ran out (redeliver revives it)."`
	Attempts       int               `json:"attempts" doc:"Attempts since it was created or last redelivered."`
	LastStatusCode int               `json:"last_status_code,omitempty"`
	LastError      string            `json:"last_error,omitempty"`
	LastLatencyMS  int               `json:"last_latency_ms,omitempty"`
	RetryAt        *time.Time        `json:"retry_at,omitempty" doc:"When the next attempt is due (pending after a failure)."`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	DeliveredAt    *time.Time        `json:"delivered_at,omitempty"`
	Log            []DeliveryAttempt `json:"attempt_log,omitempty" doc:"Every attempt, oldest first (in a delivery's own answer and the log)."`
}

// DeliveryAttempt is one POST of a delivery.
type DeliveryAttempt struct {
	Attempt    int       `json:"attempt"`
	StatusCode int       `json:"status_code,omitempty"`
	LatencyMS  int       `json:"latency_ms"`
	Error      string    `json:"error,omitempty"`
	At         time.Time `json:"at"`
}

const deliveryCols = `id::text, subscription_id, event_id, event_seq, event_type, status, attempts, coalesce(last_status_code, 0),
	coalesce(last_error, ''), coalesce(last_latency_ms, 0), retry_at, created_at, updated_at, delivered_at`

func scanDelivery(r pgx.Row) (Delivery, error) {
	var d Delivery
	err := r.Scan(&d.ID, &d.SubscriptionID, &d.EventID, &d.EventSeq, &d.EventType, &d.Status, &d.Attempts, &d.LastStatusCode,
		&d.LastError, &d.LastLatencyMS, &d.RetryAt, &d.CreatedAt, &d.UpdatedAt, &d.DeliveredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("webhook delivery: %w", strata.ErrNotFound)
	}
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	return d, pg.Interpret(err)
}

// Deliveries lists a subscription's deliveries, newest first, with their attempts.
func (s *Store) Deliveries(ctx context.Context, db pg.DBTX, org, sub, status, before string, limit int) ([]Delivery, error) {
	if _, err := s.Get(ctx, db, org, sub); err != nil {
		return nil, err
	}
	if before != "" {
		if _, err := uuid.Parse(before); err != nil {
			return nil, strata.Invalid("cursor", "is not a cursor this API returned")
		}
	}
	rows, err := db.Query(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries
		WHERE org_id = $1 AND subscription_id = $2 AND ($3 = '' OR status = $3) AND ($4 = '' OR id < $4::uuid)
		ORDER BY id DESC LIMIT $5`, org, sub, status, before, limit)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) { return scanDelivery(r) })
	if err != nil || len(ds) == 0 {
		return ds, pg.Interpret(err)
	}
	ids := make([]string, len(ds))
	at := map[string]int{}
	for i, d := range ds {
		ids[i], at[d.ID] = d.ID, i
	}
	rows, err = db.Query(ctx, `SELECT delivery_id::text, attempt, coalesce(status_code, 0), latency_ms, coalesce(error, ''), at
		FROM webhook_attempts WHERE org_id = $1 AND delivery_id = ANY($2::uuid[]) ORDER BY id`, org, ids)
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a DeliveryAttempt
		if err := rows.Scan(&id, &a.Attempt, &a.StatusCode, &a.LatencyMS, &a.Error, &a.At); err != nil {
			return nil, pg.Interpret(err)
		}
		a.At = a.At.UTC()
		ds[at[id]].Log = append(ds[at[id]].Log, a)
	}
	return ds, pg.Interpret(rows.Err())
}

// Redeliver makes a delivery pending again (attempts from 0, same webhook-id and body) and
// enqueues it in tx.
func (s *Store) Redeliver(ctx context.Context, tx pgx.Tx, q *river.Client[pgx.Tx], org, sub, id string) (Delivery, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Delivery{}, fmt.Errorf("webhook delivery: %w", strata.ErrNotFound)
	}
	d, err := scanDelivery(tx.QueryRow(ctx, `UPDATE webhook_deliveries SET status = 'pending', attempts = 0, retry_at = NULL,
			lease_until = NULL, updated_at = $4
		WHERE org_id = $1 AND subscription_id = $2 AND id = $3::uuid RETURNING `+deliveryCols, org, sub, id, s.now()))
	if err != nil {
		return Delivery{}, err
	}
	_, err = q.InsertTx(ctx, tx, DeliverArgs{OrgID: org, DeliveryID: d.ID}, nil)
	return d, err
}

// Ping queues a webhook.ping delivery to the subscription (active or not) in tx.
func (s *Store) Ping(ctx context.Context, tx pgx.Tx, q *river.Client[pgx.Tx], org, sub string) (Delivery, error) {
	if _, err := s.Get(ctx, tx, org, sub); err != nil {
		return Delivery{}, err
	}
	eid, _ := uuid.NewV7()
	now := s.now()
	body, _ := json.Marshal(outbox.Event{Seq: 0, ID: eid.String(), Type: outbox.WebhookPing, OrgID: org,
		Data: json.RawMessage(`{"subscription_id":` + strconv.Quote(sub) + `}`), CreatedAt: now})
	d, err := s.insertDelivery(ctx, tx, org, sub, eid.String(), 0, outbox.WebhookPing, body, now)
	if err != nil {
		return Delivery{}, err
	}
	_, err = q.InsertTx(ctx, tx, DeliverArgs{OrgID: org, DeliveryID: d.ID}, nil)
	return d, err
}

func (s *Store) insertDelivery(ctx context.Context, db pg.DBTX, org, sub, eventID string, seq int64, typ string, body []byte, now time.Time) (Delivery, error) {
	id, _ := uuid.NewV7()
	return scanDelivery(db.QueryRow(ctx, `INSERT INTO webhook_deliveries
			(org_id, id, subscription_id, event_id, event_seq, event_type, body, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING `+deliveryCols, org, id, sub, eventID, seq, typ, string(body), now))
}

// DeliverArgs is the River job of one delivery attempt series. It names ids only.
type DeliverArgs struct {
	OrgID      string `json:"org_id"`
	DeliveryID string `json:"delivery_id"`
}

// Kind names the job.
func (DeliverArgs) Kind() string { return "webhook_delivery" }

// Deliverer POSTs deliveries. Its batch path (the dispatcher's: Dispatcher.Deliverer) sends
// claimed deliveries with Workers senders and records their outcomes in batches
// (batch.go); it is also River's worker for DeliverArgs, the jobs a ping or a redelivery
// queues, which it claims, sends and records alone. Either way a failed attempt is retried
// at its retry_at by the dispatcher's claim pass, not by River.
type Deliverer struct {
	river.WorkerDefaults[DeliverArgs]
	Pool           *pgxpool.Pool
	Store          *Store
	Client         *http.Client  // NewClient's
	MaxAttempts    int           // then dead
	Backoff        time.Duration // before the second attempt; doubles, at most an hour
	RequestTimeout time.Duration // per request
	Workers        int           // attempts at once on the batch path; default QueueWorkers
	Metrics        *Metrics      // optional
	Log            *slog.Logger
	// Attempted, when set, is called after each attempt is recorded (tests).
	Attempted func(org string, d Delivery)

	retry atomic.Pointer[func(org string, at time.Time)] // the dispatcher's: schedules a claim pass
}

// NewClient is the HTTP client deliveries use: no proxy, no redirects followed, and the
// SSRF guard on every connection it dials.
func NewClient(timeout time.Duration, allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: dialControl(allowPrivate)}
	tr := &http.Transport{Proxy: nil, DialContext: d.DialContext, MaxIdleConnsPerHost: QueueWorkers, // a sender each: no redial per request
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// InsertOpts: one attempt per job; a failed attempt is retried by the dispatcher's claim pass.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1, Queue: Queue}
}

// Queue is the River queue pings and redeliveries run on (app gives it QueueWorkers
// workers): its own, so slow receivers never hold up the default queue's work.
const Queue = "webhooks"

// QueueWorkers is how many River deliveries run at once on a replica, and the batch path's
// default number of senders.
const QueueWorkers = 32

func (w *Deliverer) backoff(attempt int) time.Duration {
	d := w.Backoff
	for i := 1; i < attempt && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}

// Timeout bounds one job run (one attempt).
func (w *Deliverer) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return w.RequestTimeout + 10*time.Second
}

// Work makes one attempt of the job's delivery if it is due (a delivery already delivered,
// dead, deleted, leased by another attempt or waiting for its retry is left alone) and
// records it.
func (w *Deliverer) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	cs, _, err := w.claim(ctx, job.Args.OrgID, job.Args.DeliveryID, 1)
	if err != nil {
		return err
	}
	for _, c := range cs {
		o := w.attempt(ctx, c, false)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := w.record(rctx, c.org, []outcome{o})
		cancel()
		if err != nil {
			w.log().Warn("webhooks: recording a delivery attempt", "org", c.org, "delivery", c.d.ID, "err", err)
			return err
		}
		w.recorded([]outcome{o})
	}
	return nil
}

// post sends one signed request (a signature per secret, space-separated, the current
// secret's first); a non-2xx answer is an error.
func (w *Deliverer) post(ctx context.Context, t target, msgID string, body []byte) (code, latencyMS int, err error) {
	if t.err != nil {
		return 0, 0, t.err
	}
	ctx, cancel := context.WithTimeout(ctx, w.RequestTimeout)
	defer cancel()
	ts := time.Now().Unix()
	sigs := make([]string, len(t.secrets))
	for i, secret := range t.secrets {
		if sigs[i], err = Sign(secret, msgID, ts, body); err != nil {
			return 0, 0, err
		}
	}
	sig := strings.Join(sigs, " ")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Strata-Webhooks/1")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	began := time.Now()
	resp, err := w.Client.Do(req)
	latencyMS = int(time.Since(began).Milliseconds())
	if err != nil {
		return 0, latencyMS, &attemptError{msg: attemptMessage(err), err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, latencyMS, fmt.Errorf("the receiver answered %d", resp.StatusCode)
	}
	return resp.StatusCode, latencyMS, nil
}

// attemptError is a failed request told by a fixed text (attemptMessage), still matching
// the client's error for errors.Is (a shutdown's cancellation).
type attemptError struct {
	msg string
	err error
}

func (e *attemptError) Error() string { return e.msg }
func (e *attemptError) Unwrap() error { return e.err }

// Prune deletes org's finished (delivered or dead) deliveries last updated before before,
// with their attempts.
func Prune(ctx context.Context, db pg.DBTX, org string, before time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM webhook_deliveries WHERE org_id = $1 AND status <> 'pending' AND updated_at < $2`,
		org, before)
	return tag.RowsAffected(), pg.Interpret(err)
}
