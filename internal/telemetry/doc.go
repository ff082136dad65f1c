// Package telemetry owns Strata's OpenTelemetry tracing: the tracer provider built from the
// standard OTEL_* environment (the SDK reads it), and the small instruments the composition
// root installs on the stores and clients — a pgx tracer, a go-redis hook, an HTTP server
// middleware, an outgoing-HTTP transport, River middleware that carries a request's trace
// context into the jobs it queues, and a slog handler that adds trace ids to log records.
//
// Tracing is off unless an OTLP endpoint is configured: Setup then installs nothing, the
// global provider stays OpenTelemetry's no-op one, and the composition root installs none of
// the instruments, so an untraced server runs the same code it ran before tracing existed.
//
// Guarantee: no span carries personal data. Statements are recorded as their SQL text
// without arguments, Redis commands by name only (never keys or values), HTTP spans by
// method, route pattern and status (never the raw path, a query or a body).
package telemetry
