package telemetry

import (
	"context"
	"errors"
	"net"
	"strings"

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

// ProcessHook implements redis.Hook.
func (RedisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return next(ctx, cmd)
		}
		op := strings.ToUpper(cmd.Name())
		ctx, span := tracer().Start(ctx, "redis "+op, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(redisSystem, attribute.String("db.operation.name", op)))
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
			names[i] = strings.ToUpper(c.Name())
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
