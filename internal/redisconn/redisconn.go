// Package redisconn opens Strata's Redis client and translates its errors. The client is
// go-redis' UniversalClient, so STRATA_REDIS_URL may name one server (redis://host:6379/0)
// or a cluster (redis://host1:6379?addr=host2:6379&addr=host3:6379). Every key Strata
// writes starts with a configurable prefix and carries a hash tag per owning entity, so all
// keys of one session land on one cluster slot and multi-key scripts stay legal.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/strata-mem/strata/internal/strata"
)

// New opens a client for rawURL with bounded timeouts; it does not wait for Redis.
func New(rawURL string, timeout time.Duration) (redis.UniversalClient, error) {
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("STRATA_REDIS_URL: %w", err)
	}
	if u.Query().Has("addr") {
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("STRATA_REDIS_URL (cluster): %w", err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
		opt.PoolTimeout = timeout
		opt.ContextTimeoutEnabled = true
		c := redis.NewClusterClient(opt)
		c.AddHook(callBound{timeout})
		return c, nil
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("STRATA_REDIS_URL: %w", err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
	opt.PoolTimeout = timeout
	opt.MaxRetries = 1
	opt.ContextTimeoutEnabled = true // per-call deadlines bound a hung (not refusing) Redis
	opt.PoolSize = 64
	opt.MinIdleConns = 4
	c := redis.NewClient(opt)
	c.AddHook(callBound{timeout})
	return c, nil
}

// callBound bounds each command or pipeline, as a whole, by the store timeout: the wait
// for a pooled connection, dialing one, writing, reading, and the retry of a command whose
// connection failed (MaxRetries) all fit in it. Without it a hung Redis (a black hole: no
// reset, no answer) cost a read timeout per attempt, and a caller's longer deadline
// (ContextTimeoutEnabled) governed the pool wait.
type callBound struct{ d time.Duration }

func (h callBound) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h callBound) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		rs, _ := ctx.Value(requestKey{}).(*requestState)
		if rs != nil && rs.hung.Load() {
			cmd.SetErr(errHungEarlier)
			return errHungEarlier
		}
		bctx, cancel := context.WithTimeout(ctx, h.d)
		defer cancel()
		err := next(bctx, cmd)
		if rs != nil && timedOut(err) {
			rs.hung.Store(true)
		}
		return err
	}
}

func (h callBound) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rs, _ := ctx.Value(requestKey{}).(*requestState)
		if rs != nil && rs.hung.Load() {
			for _, c := range cmds {
				c.SetErr(errHungEarlier)
			}
			return errHungEarlier
		}
		bctx, cancel := context.WithTimeout(ctx, h.d)
		defer cancel()
		err := next(bctx, cmds)
		if rs != nil && timedOut(err) {
			rs.hung.Store(true)
		}
		return err
	}
}

type requestKey struct{}

// requestState is one request's memory of Redis: hung once a call of it timed out.
type requestState struct{ hung atomic.Bool }

// errHungEarlier answers the later Redis calls of a request one of whose calls timed out.
var errHungEarlier = fmt.Errorf("redis did not answer an earlier call of this request within the store timeout: %w",
	context.DeadlineExceeded)

// WithRequest marks ctx as one request's: once one of its Redis calls timed out (a hung
// Redis), its later calls fail at once (an UnavailableError) instead of each waiting out
// the store timeout — a request that degrades without Redis (the turn context) answers
// within one store timeout, not one per call.
func WithRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestKey{}, &requestState{})
}

func timedOut(err error) bool {
	var ne net.Error
	return err != nil && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()))
}

// Interpret maps go-redis errors: redis.Nil → ErrNotFound; network failures and timeouts →
// UnavailableError (503); anything else unchanged.
func Interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.Nil) {
		return strata.ErrNotFound
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, net.ErrClosed) || isConnRefusedOrEOF(err) {
		return &strata.UnavailableError{Store: "redis", Err: err}
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && (redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) || redis.IsTryAgainError(err)) {
		return &strata.UnavailableError{Store: "redis", Err: err}
	}
	// A redirection go-redis did not follow to the end (a slot moving mid-script, past its
	// redirect limit) is a cluster in motion: retry later, like TRYAGAIN.
	if _, ok := redis.IsMovedError(err); ok {
		return &strata.UnavailableError{Store: "redis", Err: err}
	}
	if _, ok := redis.IsAskError(err); ok {
		return &strata.UnavailableError{Store: "redis", Err: err}
	}
	return err
}
