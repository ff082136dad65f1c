package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/webhooks"
)

// Webhooks (docs/events.md): per-org subscriptions to outbox events, their delivery log,
// redelivery and a test ping.

type WebhookBody struct {
	URL         *string  `json:"url,omitempty" maxLength:"2000" doc:"Where events are POSTed (http or https). It must not resolve to a loopback, link-local or private address unless the server runs with STRATA_WEBHOOK_ALLOW_PRIVATE=true."`
	EventTypes  []string `json:"event_types,omitempty" maxItems:"50" doc:"Event types to deliver (docs/events.md), or [\"*\"] for all."`
	Secret      *string  `json:"secret,omitempty" maxLength:"200" doc:"The signing secret (\"whsec_\" + base64 of 24-64 bytes). Omit it on create to have one generated; it is shown only in the create answer. It cannot be changed by an update: rotate it with POST /v1/admin/webhooks/{id}/rotate-secret."`
	Active      *bool    `json:"active,omitempty" doc:"Default true. An inactive subscription receives nothing."`
	Description *string  `json:"description,omitempty" maxLength:"500"`
}

type CreateWebhookInput struct {
	Body WebhookBody
}

type CreatedWebhook struct {
	webhooks.Subscription
	Secret string `json:"secret" doc:"The signing secret. It is shown only in this response; store it now."`
}

type CreateWebhookOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   CreatedWebhook
}

type WebhookPath struct {
	ID string `path:"id" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
}

type UpdateWebhookInput struct {
	WebhookPath
	IfMatch string `header:"If-Match" doc:"The subscription's version (ETag) this change expects; stale → 409, nothing written."`
	Body    WebhookBody
}

type DeleteWebhookInput struct {
	WebhookPath
	IfMatch string `header:"If-Match" doc:"The subscription's version (ETag) this deletion expects."`
}

type WebhookOutput struct {
	ETag string `header:"ETag"`
	Body webhooks.Subscription
}

type ListWebhooksInput struct {
	Page
}

type ListWebhooksOutput struct {
	Body List[webhooks.Subscription]
}

type ListDeliveriesInput struct {
	WebhookPath
	Status string `query:"status" enum:"pending,delivered,dead," doc:"Only deliveries in this state."`
	Page
}

type ListDeliveriesOutput struct {
	Body List[webhooks.Delivery]
}

type RotateWebhookSecretInput struct {
	WebhookPath
	IfMatch string `header:"If-Match" doc:"The subscription's version (ETag) this rotation expects; stale → 409, nothing written."`
	Body    struct {
		Secret              string `json:"secret,omitempty" maxLength:"200" doc:"The new signing secret (\"whsec_\" + base64 of 24-64 bytes). Omit it to have one generated."`
		KeepPreviousSeconds *int   `json:"keep_previous_seconds,omitempty" minimum:"0" maximum:"2592000" doc:"How long the secret being replaced stays valid (default 86400, one day; 0 retires it now). Meanwhile every delivery is signed with both secrets."`
	}
}

type RotateWebhookSecretOutput struct {
	ETag string `header:"ETag"`
	Body CreatedWebhook
}

type DeliveryPath struct {
	WebhookPath
	Delivery string `path:"delivery" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
}

type DeliveryOutput struct {
	Status int
	Body   webhooks.Delivery
}

var OpCreateWebhook = huma.Operation{
	OperationID: "create-webhook", Method: http.MethodPost, Path: "/v1/admin/webhooks", Tags: []string{"admin"},
	Summary: "Subscribe a URL to events", DefaultStatus: http.StatusCreated,
	Description: "Deliveries are signed per Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) with the secret, which is returned once.",
}

var OpListWebhooks = huma.Operation{
	OperationID: "list-webhooks", Method: http.MethodGet, Path: "/v1/admin/webhooks", Tags: []string{"admin"},
	Summary: "List webhook subscriptions (never their secrets)",
}

var OpGetWebhook = huma.Operation{
	OperationID: "get-webhook", Method: http.MethodGet, Path: "/v1/admin/webhooks/{id}", Tags: []string{"admin"},
	Summary: "Get a webhook subscription",
}

var OpUpdateWebhook = huma.Operation{
	OperationID: "update-webhook", Method: http.MethodPatch, Path: "/v1/admin/webhooks/{id}", Tags: []string{"admin"},
	Summary: "Change a webhook subscription (URL, event types, active, description)",
}

var OpDeleteWebhook = huma.Operation{
	OperationID: "delete-webhook", Method: http.MethodDelete, Path: "/v1/admin/webhooks/{id}", Tags: []string{"admin"},
	Summary: "Delete a webhook subscription and its delivery log",
}

var OpListWebhookDeliveries = huma.Operation{
	OperationID: "list-webhook-deliveries", Method: http.MethodGet, Path: "/v1/admin/webhooks/{id}/deliveries", Tags: []string{"admin"},
	Summary: "The subscription's delivery log, newest first: status, attempts with status code, latency and error",
}

var OpRedeliverWebhook = huma.Operation{
	OperationID: "redeliver-webhook", Method: http.MethodPost, Path: "/v1/admin/webhooks/{id}/deliveries/{delivery}/redeliver",
	Tags: []string{"admin"}, Summary: "Deliver again (same webhook-id and body; a dead delivery gets its attempts back)",
	DefaultStatus: http.StatusAccepted,
}

var OpRotateWebhookSecret = huma.Operation{
	OperationID: "rotate-webhook-secret", Method: http.MethodPost, Path: "/v1/admin/webhooks/{id}/rotate-secret", Tags: []string{"admin"},
	Summary:     "Replace the signing secret, keeping the previous one valid for a while",
	Description: "The new secret is returned once. Until previous_secret_expires_at every delivery carries two signatures in webhook-signature (the new secret's first), so a receiver can switch secrets at any moment of the window without refusing a delivery.",
}

var OpPingWebhook = huma.Operation{
	OperationID: "ping-webhook", Method: http.MethodPost, Path: "/v1/admin/webhooks/{id}/ping", Tags: []string{"admin"},
	Summary: "Send a webhook.ping event to the subscription", DefaultStatus: http.StatusAccepted,
}
