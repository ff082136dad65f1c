// Package httpapi is Strata's REST surface: one chi router, one huma API that generates the
// OpenAPI 3.1 document from internal/api's wire types, and the middleware every request
// passes: request id → recover → log and metrics → authentication → unit of work (one
// Postgres transaction per request, committed before the response leaves; Idempotency-Key
// records written inside it). routes.go lists the whole API top to bottom; the handlers are
// here, their operation docs and input/output types in internal/api. Handlers compose the
// tier packages; tiers never import each other or this package.
package httpapi
