// Package summaries is the tier of rolling summaries: the versioned summary of what fell out
// of a session's turn buffer (internal/working spills it to the durable turn log) and of a
// long job's episodic log beyond its newest events. It owns the table summaries
// (migrations/0029_summaries.sql).
//
// # What it guarantees
//
// Every summary of a subject (a session or a job of an org) is a new version naming the
// seqs it covers (from_seq..to_seq, and added_from, the first seq this version added) and
// who wrote it (extractive, or llm:<model> with its prompt version); versions are never
// changed, so the history reads back as it was written. Write takes the version it builds
// on: a writer that lost a race (another worker wrote first) gets strata.ConflictError and
// nothing is written, so two workers never fork a subject's history.
//
// The tier stores text; it never reads turns or events and never calls a model: the
// summarising lives in internal/consolidation (Rolling), which reads the working and
// episodic tiers and hands the text here. Summaries are a data subject's data: EraseUser
// removes a subject's, and gdpr's export reads them.
package summaries
