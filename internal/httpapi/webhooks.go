package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/webhooks"
)

// Webhooks (docs/events.md, internal/webhooks): subscriptions, their delivery log,
// redelivery and ping. Admin keys, their own org only.

func (s *Server) webhooksOn() error {
	if s.Webhooks == nil || s.WebhookQueue == nil {
		return huma.Error503ServiceUnavailable("webhooks are not configured on this server")
	}
	return nil
}

func webhookInput(b api.WebhookBody) webhooks.Input {
	return webhooks.Input{URL: b.URL, EventTypes: b.EventTypes, Secret: b.Secret, Active: b.Active, Description: b.Description}
}

func (s *Server) createWebhook(ctx context.Context, r *Request, in *api.CreateWebhookInput) (*api.CreateWebhookOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	sub, secret, err := s.Webhooks.Create(ctx, r.Tx, r.Org, r.Caller.KeyID, webhookInput(in.Body))
	if err != nil {
		return nil, err
	}
	secretInResponse(ctx, "secret")
	return &api.CreateWebhookOutput{Status: http.StatusCreated, ETag: etag(sub.Version),
		Body: api.CreatedWebhook{Subscription: sub, Secret: secret}}, nil
}

func (s *Server) listWebhooks(ctx context.Context, r *Request, in *api.ListWebhooksInput) (*api.ListWebhooksOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	subs, err := s.Webhooks.List(ctx, r.Tx, r.Org, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &api.ListWebhooksOutput{Body: page(subs, limit, func(x webhooks.Subscription) string { return x.ID })}, nil
}

func (s *Server) getWebhook(ctx context.Context, r *Request, in *api.WebhookPath) (*api.WebhookOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	sub, err := s.Webhooks.Get(ctx, r.Tx, r.Org, in.ID)
	if err != nil {
		return nil, err
	}
	return &api.WebhookOutput{ETag: etag(sub.Version), Body: sub}, nil
}

func (s *Server) updateWebhook(ctx context.Context, r *Request, in *api.UpdateWebhookInput) (*api.WebhookOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	sub, err := s.Webhooks.Update(ctx, r.Tx, r.Org, in.ID, webhookInput(in.Body), im)
	if err != nil {
		return nil, err
	}
	return &api.WebhookOutput{ETag: etag(sub.Version), Body: sub}, nil
}

func (s *Server) deleteWebhook(ctx context.Context, r *Request, in *api.DeleteWebhookInput) (*api.WebhookOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	sub, err := s.Webhooks.Delete(ctx, r.Tx, r.Org, in.ID, im)
	if err != nil {
		return nil, err
	}
	return &api.WebhookOutput{ETag: etag(sub.Version), Body: sub}, nil
}

func (s *Server) listWebhookDeliveries(ctx context.Context, r *Request, in *api.ListDeliveriesInput) (*api.ListDeliveriesOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	limit, err := in.Page.Size()
	if err != nil {
		return nil, err
	}
	ds, err := s.Webhooks.Deliveries(ctx, r.Tx, r.Org, in.ID, in.Status, in.Cursor, limit+1)
	if err != nil {
		return nil, err
	}
	return &api.ListDeliveriesOutput{Body: page(ds, limit, func(d webhooks.Delivery) string { return d.ID })}, nil
}

func (s *Server) redeliverWebhook(ctx context.Context, r *Request, in *api.DeliveryPath) (*api.DeliveryOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	d, err := s.Webhooks.Redeliver(ctx, r.Tx, s.WebhookQueue, r.Org, in.ID, in.Delivery)
	if err != nil {
		return nil, err
	}
	return &api.DeliveryOutput{Status: http.StatusAccepted, Body: d}, nil
}

func (s *Server) pingWebhook(ctx context.Context, r *Request, in *api.WebhookPath) (*api.DeliveryOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	d, err := s.Webhooks.Ping(ctx, r.Tx, s.WebhookQueue, r.Org, in.ID)
	if err != nil {
		return nil, err
	}
	return &api.DeliveryOutput{Status: http.StatusAccepted, Body: d}, nil
}

func (s *Server) rotateWebhookSecret(ctx context.Context, r *Request, in *api.RotateWebhookSecretInput) (*api.RotateWebhookSecretOutput, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	im, err := ifMatchPtr(in.IfMatch)
	if err != nil {
		return nil, err
	}
	keep := 24 * time.Hour
	if in.Body.KeepPreviousSeconds != nil {
		keep = time.Duration(*in.Body.KeepPreviousSeconds) * time.Second
	}
	sub, secret, err := s.Webhooks.RotateSecret(ctx, r.Tx, r.Org, in.ID, in.Body.Secret, keep, im)
	if err != nil {
		return nil, err
	}
	secretInResponse(ctx, "secret")
	return &api.RotateWebhookSecretOutput{ETag: etag(sub.Version), Body: api.CreatedWebhook{Subscription: sub, Secret: secret}}, nil
}
