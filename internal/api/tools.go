package api

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/strata-mem/strata/internal/mcp"
)

type ToolsOutput struct {
	Body struct {
		Items []mcp.OpenAIFunction `json:"items" doc:"OpenAI function-calling tools: pass as tools=[...] to the Chat Completions or Responses API. Execute a call with the same arguments through POST /mcp (tools/call) or the REST operation named in the description."`
	}
}

var OpListTools = huma.Operation{
	OperationID: "list-tools", Method: http.MethodGet, Path: "/v1/tools", Tags: []string{"context"},
	Summary: "The agent tools as OpenAI function-calling schemas",
	Description: "The same tools the MCP server at /mcp offers (get_context, remember, recall, forget, resume_job, " +
		"start_step, complete_step, fail_step, log_event, was_applied, save_checkpoint, kv_get, kv_set, handoff, " +
		"ack_handoff), with input schemas generated from this API's own request schemas, so a non-MCP agent can " +
		"wire them in one line.",
}
