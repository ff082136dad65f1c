package api

import (
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/keyvalue"
)

// KVPath is the path of one key.
type KVPath struct {
	Namespace string `path:"namespace" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Namespace (a group of keys, e.g. brand, captions)."`
	Key       string `path:"key" pattern:"^[A-Za-z0-9._:-]{1,200}$" doc:"Key within the namespace."`
}

type KvPutInput struct {
	KVPath
	IfMatch     string `header:"If-Match" doc:"Write only if the entry at this scope is at this version (its ETag); otherwise 409."`
	IfNoneMatch string `header:"If-None-Match" doc:"* : create only; 409 if a live entry exists at this scope."`
	Body        struct {
		Value json.RawMessage `json:"value" doc:"Any JSON value except null (size limit STRATA_KV_MAX_VALUE_BYTES)."`
		ScopeBody
		TTLSeconds int64 `json:"ttl_seconds,omitempty" minimum:"1" maximum:"315360000" doc:"Hide the entry this many seconds after this write. Each write sets its own TTL (none when absent)."`
	}
}

type KvRestoreInput struct {
	KVPath
	IfMatch string `header:"If-Match" doc:"Restore only if the entry at this scope is at this version; otherwise 409."`
	Body    struct {
		Version int64 `json:"version" minimum:"1" doc:"The version (from the history) whose value to write again."`
		ScopeBody
		TTLSeconds int64 `json:"ttl_seconds,omitempty" minimum:"1" maximum:"315360000" doc:"TTL of the new version (none when absent)."`
	}
}

type KvEntryOutput struct {
	Status int
	ETag   string `header:"ETag"`
	Body   keyvalue.KVEntry
}

type KvGetInput struct {
	KVPath
	ScopeQuery
	Exact bool `query:"exact" doc:"Read only the most specific given scope level instead of resolving session > agent > user > org."`
}

type KvDeleteInput struct {
	KVPath
	ScopeQuery
	IfMatch string `header:"If-Match" doc:"Delete only if the entry is at this version; otherwise 409."`
}

type KvHistoryInput struct {
	KVPath
	ScopeQuery
	Page
}

type KvHistoryOutput struct {
	Body List[keyvalue.KVVersion]
}

type KvListInput struct {
	Namespace string `path:"namespace" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	ScopeQuery
	Resolve bool `query:"resolve" doc:"List, per key, the entry a resolved GET would answer (session > agent > user > org) instead of the one given level."`
	Page
}

type KvListOutput struct {
	Body List[keyvalue.KVEntry]
}

type KvBatchGetInput struct {
	Namespace string `path:"namespace" pattern:"^[A-Za-z0-9._:-]{1,200}$"`
	Body      struct {
		Keys []string `json:"keys" minItems:"1" maxItems:"1000" doc:"Keys to read (each resolved like GET)."`
		ScopeBody
		Exact bool `json:"exact,omitempty" doc:"Read only the most specific given scope level."`
	}
}

type KvBatchGetOutput struct {
	Body struct {
		Items   []keyvalue.KVEntry `json:"items" doc:"The keys found, in request order."`
		Missing []string           `json:"missing" doc:"The keys no scope level has."`
	}
}

var OpPutKv = huma.Operation{
	OperationID: "put-kv", Method: http.MethodPut, Path: "/v1/kv/{namespace}/{key}", Tags: []string{"key-value"},
	Summary: "Write a key at one scope",
	Description: "Writes `value` at the most specific scope level the body names (session > agent > user > org; " +
		"org when none). Less specific ids given are recorded (user_id for erasure) but do not change the level. " +
		"Answers the stored entry with its version (also the ETag): 201 when the key was not live at that scope, else 200. " +
		"`If-Match` with a stale version → 409 and nothing is written. Every write is kept in the history.",
}

var OpGetKv = huma.Operation{
	OperationID: "get-kv", Method: http.MethodGet, Path: "/v1/kv/{namespace}/{key}", Tags: []string{"key-value"},
	Summary: "Read a key, resolved across scopes",
	Description: "Answers the entry at the most specific scope level that has the key — session, then agent, then user, " +
		"then org — with `level` saying which answered. `exact=true` reads only the most specific given level. " +
		"Served from the Redis cache when possible; never older than an acknowledged write.",
}

var OpDeleteKv = huma.Operation{
	OperationID: "delete-kv", Method: http.MethodDelete, Path: "/v1/kv/{namespace}/{key}", Tags: []string{"key-value"},
	Summary: "Delete a key at one scope",
	Description: "Deletes the entry at exactly the most specific given scope level (nothing is resolved). " +
		"Answers the deletion with its version and `deleted: true`; the history keeps every earlier version.",
}

var OpKvHistory = huma.Operation{
	OperationID: "kv-history", Method: http.MethodGet, Path: "/v1/kv/{namespace}/{key}/history", Tags: []string{"key-value"},
	Summary: "Every version of a key at one scope",
	Description: "Newest first: op (put, restore, delete), value, who wrote it (API key id, agent_id) and when. " +
		"The scope names one level exactly, as for DELETE. `cursor` is the next_cursor of the previous page.",
}

var OpRestoreKv = huma.Operation{
	OperationID: "restore-kv", Method: http.MethodPost, Path: "/v1/kv/{namespace}/{key}/restore", Tags: []string{"key-value"},
	Summary: "Restore an earlier version of a key",
	Description: "Writes the value of `version` again as a new version (op `restore`, audited like any write). " +
		"The scope names one level exactly. 201 if the key was not live at that scope, else 200.",
}

var OpListKv = huma.Operation{
	OperationID: "list-kv", Method: http.MethodGet, Path: "/v1/kv/{namespace}", Tags: []string{"key-value"},
	Summary: "List a namespace for a scope",
	Description: "Live entries in key order. Without `resolve`, the entries at the most specific given scope level; " +
		"with `resolve=true`, per key the entry a resolved GET would answer. Read from Postgres.",
}

var OpBatchGetKv = huma.Operation{
	OperationID: "batch-get-kv", Method: http.MethodPost, Path: "/v1/kv/{namespace}/batch-get", Tags: []string{"key-value"},
	Summary: "Read many keys in one call",
	Description: "Resolves each key like GET (one cache round trip, at most one Postgres query for the misses). " +
		"A read: it writes nothing and needs no Idempotency-Key.",
}

// Data subjects (GDPR Art. 18, enforced by the wrapper: internal/httpapi/subjects.go): the scope asked for
// and every entry or version answered.

func (o *KvEntryOutput) SubjectUsers() []string { return []string{o.Body.UserID} }

func (o *KvHistoryOutput) SubjectUsers() []string {
	users := make([]string, len(o.Body.Items))
	for i, v := range o.Body.Items {
		users[i] = v.UserID
	}
	return users
}

func (o *KvListOutput) SubjectUsers() []string {
	users := make([]string, len(o.Body.Items))
	for i, e := range o.Body.Items {
		users[i] = e.UserID
	}
	return users
}

func (in *KvBatchGetInput) SubjectUsers() []string { return []string{in.Body.UserID} }

func (o *KvBatchGetOutput) SubjectUsers() []string {
	users := make([]string, len(o.Body.Items))
	for i, e := range o.Body.Items {
		users[i] = e.UserID
	}
	return users
}
