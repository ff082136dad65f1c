package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
)

// StreamEvent is one event of GET /v1/events/stream (docs/events.md): ids only, subjects as
// pseudonyms.
type StreamEvent struct {
	Seq       int64           `json:"seq"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	OrgID     string          `json:"org_id"`
	JobID     string          `json:"job_id,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// StreamOptions filter a stream and say where it starts.
type StreamOptions struct {
	Types []string // event types (empty: all)
	Job   string   // only this job's events
	After int64    // resume after this seq (Last-Event-ID); 0: from the beginning
	// Reconnected, when set, is called after the stream was lost and before it reconnects
	// (the error, and the seq it resumes after).
	Reconnected func(err error, after int64)
}

// StreamEvents calls fn for each event of the caller's org, in order, until ctx ends or fn
// returns an error (which it returns). A lost connection is reopened with backoff, resuming
// after the last event fn was given, so fn sees every event once. A 4xx answer (bad filter,
// bad key) ends it with that error.
func (c *Client) StreamEvents(ctx context.Context, opts StreamOptions, fn func(StreamEvent) error) error {
	after := opts.After
	backoff := c.minBackoff
	if backoff <= 0 {
		backoff = 100 * time.Millisecond
	}
	for {
		err := c.streamOnce(ctx, opts, &after, fn)
		var fnErr fnError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if opts.Reconnected != nil {
			opts.Reconnected(err, after)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

func (c *Client) streamOnce(ctx context.Context, opts StreamOptions, after *int64, fn func(StreamEvent) error) error {
	q := url.Values{}
	if len(opts.Types) > 0 {
		q.Set("types", strings.Join(opts.Types, ","))
	}
	if opts.Job != "" {
		q.Set("job", opts.Job)
	}
	u := c.base + "/v1/events/stream"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "text/event-stream")
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if *after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*after, 10))
	}
	// The stream lives long: no overall timeout (the server's heartbeat keeps it alive).
	hc := &http.Client{Transport: c.http.Transport}
	resp, err := hc.Do(req)
	if err != nil {
		return &netError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		e := &Error{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
		_ = json.Unmarshal(b, e)
		return e
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data == "" {
				continue
			}
			var ev StreamEvent
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return fmt.Errorf("decoding an event: %w", err)
			}
			data = ""
			if ev.Seq <= *after {
				continue
			}
			if err := fn(ev); err != nil {
				return fnError{err}
			}
			*after = ev.Seq
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		}
	}
	if err := sc.Err(); err != nil {
		return &netError{err}
	}
	return &netError{io.ErrUnexpectedEOF}
}
