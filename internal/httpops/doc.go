// Package httpops is what every HTTP surface of the server shares, whatever it serves (the
// /v1 API in internal/httpapi, the MCP endpoint, the web console): request ids, the access
// log and request metrics with panic recovery, RFC 9457 problems written outside huma, the
// per-key rate limit, the query-string check, health and readiness, and profiling. It knows
// no operation and no tier; internal/httpapi composes it around the API.
package httpops
