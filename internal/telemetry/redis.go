package telemetry

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// RedisHook is a go-redis hook making a client span per command and per pipeline. Spans
// name the command (GET, EVALSHA...) and never carry its keys, arguments or replies: keys
// hold org, session and user ids.
type RedisHook struct{}

var redisSystem = attribute.String("db.system.name", "redis")

// DialHook implements redis.Hook.
func (RedisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

// redisCmd is what the spans of one command name carry, computed once per name.
type redisCmd struct {
	op    string // GET, EVALSHA...
	name  string // "redis GET"
	start []trace.SpanStartOption
}

var redisCmds sync.Map // go-redis's command name (lower case) → *redisCmd

// command is name's cached span data. Command names are a fixed set, but a bound keeps an
// unexpected caller (Do with arbitrary names) from growing the cache.
func command(name string) *redisCmd {
	if c, ok := redisCmds.Load(name); ok {
		return c.(*redisCmd)
	}
	op := strings.ToUpper(name)
	c := &redisCmd{op: op, name: "redis " + op, start: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(redisSystem, attribute.String("db.operation.name", op))}}
	if redisCmdCount.Load() < maxStmts {
		if prev, loaded := redisCmds.LoadOrStore(name, c); loaded {
			return prev.(*redisCmd)
		}
		redisCmdCount.Add(1)
	}
	return c
}

var redisCmdCount atomic.Int64

// ProcessHook implements redis.Hook.
func (RedisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return next(ctx, cmd)
		}
		c := command(cmd.Name())
		ctx, span := tracer().Start(ctx, c.name, c.start...)
		err := next(ctx, cmd)
		endRedis(span, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: one span for the round trip, naming its
// commands.
func (RedisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return next(ctx, cmds)
		}
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = command(c.Name()).op
		}
		ctx, span := tracer().Start(ctx, "redis pipeline", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(redisSystem, attribute.String("db.operation.name", "PIPELINE"),
				attribute.Int("db.operation.batch.size", len(cmds)), attribute.StringSlice("strata.redis.commands", names)))
		err := next(ctx, cmds)
		endRedis(span, err)
		return err
	}
}

func endRedis(span trace.Span, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		span.SetStatus(codes.Error, "redis command failed") // the error text may quote a key: not recorded
	}
	span.End()
}
