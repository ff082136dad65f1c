-- The trace context (W3C traceparent: a trace id, a span id and flags, nothing of a
-- subject) of the request whose turn last made the session's extraction pending, when that
-- request was traced (issue 44, docs/observability.md): the dispatcher puts it in the
-- extract_session job's metadata, so the job's span links to the request that queued it.
ALTER TABLE extraction_state ADD COLUMN trace_parent text;
