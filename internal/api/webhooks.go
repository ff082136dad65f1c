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
	Secret      *string  `json:"secret,omitempty" maxLength:"200" doc:"The signing secret (\"whsec_\" + base64 of 24-64 bytes). Omit it on create to have one generated; it is shown only in the create answer. It cannot be changed."`
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

var OpPingWebhook = huma.Operation{
	OperationID: "ping-webhook", Method: http.MethodPost, Path: "/v1/admin/webhooks/{id}/ping", Tags: []string{"admin"},
	Summary: "Send a webhook.ping event to the subscription", DefaultStatus: http.StatusAccepted,
}
