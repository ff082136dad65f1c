// Package api is the wire contract of /v1: request and response types and their OpenAPI
// operation docs; no handlers, no transport.
//
// Each <area>.go holds one area's operation docs (OpX, a huma.Operation: id, method, path,
// summary, description) and the input and output structs huma reads the OpenAPI document
// from (path, query and header parameters by tag, the JSON body as the Body field, headers
// and the status of answers). The handlers that take and answer them are in
// internal/httpapi/<area>.go, registered one line each in internal/httpapi/routes.go.
//
// Types that carry data subjects implement the small interfaces of subjects.go
// (SubjectNamer, JobNamer, ItemFilter, ScopeNamer), through which the transport's wrapper
// enforces each operation's GDPR Art. 18 declaration.
//
// Renaming a type here renames its OpenAPI component (huma names schemas after Go types):
// internal/httpapi's TestOpenAPIMatchesGolden catches it.
package api
