// Package extraction is conversation memory: it reads a session's new turns and the user's
// relevant existing memories and preferences, asks the org's LLM (any OpenAI-compatible
// chat-completions endpoint, through go-openai, with a strict JSON-schema answer) what to
// remember, validates the answer, and applies the decisions through the tiers' own write
// paths: a fact is added (deduplicated as every write is), updated (a new version
// superseding the old), retracted (its validity ends; the history stays) or left alone; a
// preference goes to key-value memory (namespace "preferences", user level) with history.
//
// Guarantees: turns are data, never instructions (the answer can only name memories it was
// shown and turns of the batch; every result has trust "extracted"; nothing is written
// outside the turns' scope; a result's writer comes from every turn's recorded writer, never
// from the turns the model cites, and a batch with a quarantined writer is held); each
// session has a cursor (the last extracted turn) that
// advances in the same transaction as the decisions, so a crash leaves nothing half
// applied and no turn is extracted twice; nothing is extracted for a restricted subject;
// usage is limited per org and hour. The request path only records that turns wait (one
// statement in the append's COMMIT round trip); River workers do the rest. Extractor.Extract
// and Extractor.Apply are the synchronous API (POST /v1/memories/extract, Mem0's add with
// infer). docs/extraction.md explains it all.
package extraction
