// Package openaiagentstest runs the OpenAI Agents SDK side of Strata from `go test`: it starts a
// real Strata server (apptest) and drives clients/openai-agents with Node. TestAgentSessionSurvivesKill
// runs an @openai/agents agent (a fake model provider, no network) on StrataSession for several
// turns, SIGKILLs the process, continues the conversation in a new process and checks that the
// model is given the earlier turns; it also checks popItem, clearSession and org isolation.
//
// Node 20+ is required (the test fails, not skips, without it). The npm dependencies come from
// clients/openai-agents/package-lock.json (scripts/test-deps.sh installs them).
package openaiagentstest
