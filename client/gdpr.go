package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Erasure is a GDPR erasure request (Art. 17) and, once it ran, its receipt.
type Erasure struct {
	ID           string                      `json:"id"`
	Subject      string                      `json:"subject"`
	UserID       string                      `json:"user_id,omitempty"`
	Status       string                      `json:"status"` // pending, running, completed
	Reason       string                      `json:"reason,omitempty"`
	RequestedBy  string                      `json:"requested_by"`
	RequestedAt  time.Time                   `json:"requested_at"`
	Deadline     time.Time                   `json:"deadline"`
	StartedAt    *time.Time                  `json:"started_at,omitempty"`
	FinishedAt   *time.Time                  `json:"finished_at,omitempty"`
	Counts       map[string]map[string]int64 `json:"counts"`
	Phases       []string                    `json:"phases"`
	PhasesDone   []string                    `json:"phases_done"`
	Rounds       int                         `json:"rounds"`
	Attempts     int                         `json:"attempts"`
	Verification *ErasureVerification        `json:"verification,omitempty"`
	LastError    string                      `json:"last_error,omitempty"`
}

// ErasureVerification is the erasure's final re-query of every tier.
type ErasureVerification struct {
	Clean     bool             `json:"clean"`
	At        time.Time        `json:"at"`
	Remaining map[string]int64 `json:"remaining"`
}

// Done reports whether the erasure finished.
func (e Erasure) Done() bool { return e.Status == "completed" || e.Status == "failed" }

// Progress is the fraction of phases done (0-1).
func (e Erasure) Progress() float64 {
	if e.Done() {
		return 1
	}
	if len(e.Phases) == 0 {
		return 0
	}
	return float64(len(e.PhasesDone)) / float64(len(e.Phases))
}

// RequestErasure asks for user's erasure (compliance key). reason is kept with the request.
func (c *Client) RequestErasure(ctx context.Context, user, reason string) (Erasure, error) {
	var e Erasure
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/gdpr/erasures",
		Body: map[string]string{"user_id": user, "reason": reason}}, &e)
	return e, err
}

// GetErasure reads an erasure's status and receipt.
func (c *Client) GetErasure(ctx context.Context, id string) (Erasure, error) {
	var e Erasure
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/gdpr/erasures/" + PathEscape(id)}, &e)
	return e, err
}

// WaitErasure polls an erasure every interval until it finishes or ctx ends, calling
// progress (if not nil) with each state read.
func (c *Client) WaitErasure(ctx context.Context, id string, interval time.Duration, progress func(Erasure)) (Erasure, error) {
	for {
		e, err := c.GetErasure(ctx, id)
		if err != nil {
			return e, err
		}
		if progress != nil {
			progress(e)
		}
		if e.Done() {
			return e, nil
		}
		select {
		case <-ctx.Done():
			return e, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// Restriction is the restriction-of-processing state of a subject (Art. 18).
type Restriction struct {
	UserID       string    `json:"user_id"`
	Restricted   bool      `json:"restricted"`
	RestrictedAt time.Time `json:"restricted_at,omitzero"`
	RestrictedBy string    `json:"restricted_by,omitempty"`
	Reason       string    `json:"reason,omitempty"`
}

// Restrict restricts processing of user's data.
func (c *Client) Restrict(ctx context.Context, user, reason string) (Restriction, error) {
	var r Restriction
	_, err := c.Do(ctx, Call{Method: http.MethodPost, Path: "/v1/gdpr/restrictions/" + PathEscape(user),
		Body: map[string]string{"reason": reason}}, &r)
	return r, err
}

// Unrestrict lifts the restriction.
func (c *Client) Unrestrict(ctx context.Context, user string) error {
	_, err := c.Do(ctx, Call{Method: http.MethodDelete, Path: "/v1/gdpr/restrictions/" + PathEscape(user)}, nil)
	return err
}

// GetRestriction reads whether user is restricted.
func (c *Client) GetRestriction(ctx context.Context, user string) (Restriction, error) {
	var r Restriction
	_, err := c.Do(ctx, Call{Method: http.MethodGet, Path: "/v1/gdpr/restrictions/" + PathEscape(user)}, &r)
	return r, err
}

// ExportSummary is the last line of an export.
type ExportSummary struct {
	Records int64            `json:"records"`
	Counts  map[string]int64 `json:"counts"`
}

// Export streams user's export (NDJSON, one record per line) into w without holding it in
// memory, calling line (if not nil) after each line with the lines and bytes so far. It
// returns the summary line, and an error when the stream ended without one (a broken
// export).
func (c *Client) Export(ctx context.Context, user string, w io.Writer, line func(lines, bytes int64)) (ExportSummary, error) {
	var sum ExportSummary
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/gdpr/exports?"+url.Values{"user_id": {user}}.Encode(), nil)
	if err != nil {
		return sum, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/x-ndjson")
	req.Header.Set("User-Agent", c.userAgent)
	hc := *c.http
	hc.Timeout = 0 // a large export takes as long as it takes; ctx bounds it
	resp, err := hc.Do(req)
	if err != nil {
		return sum, &netError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		e := &Error{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode), RequestID: resp.Header.Get("X-Request-Id")}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(e)
		e.Status = resp.StatusCode
		return sum, e
	}
	rd := bufio.NewReaderSize(resp.Body, 256<<10)
	var lines, n int64
	var last []byte
	for {
		b, err := rd.ReadBytes('\n')
		if len(b) > 0 {
			if _, werr := w.Write(b); werr != nil {
				return sum, werr
			}
			lines, n = lines+1, n+int64(len(b))
			if len(b) < 1<<20 {
				last = append(last[:0], b...)
			}
			if line != nil {
				line(lines, n)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return sum, &netError{err: err}
		}
	}
	var tail struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
		ExportSummary
	}
	if json.Unmarshal(last, &tail) != nil || tail.Type != "summary" {
		if tail.Type == "error" {
			return sum, fmt.Errorf("export failed on the server: %s", tail.Detail)
		}
		return sum, fmt.Errorf("export ended without its summary line after %d lines (incomplete)", lines)
	}
	return tail.ExportSummary, nil
}
