package consolidation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/strata-mem/strata/internal/answercap"
)

// Summarizer writes a job summary's text from its facts.
type Summarizer interface {
	// Summarize returns the summary text.
	Summarize(ctx context.Context, f Facts) (string, error)
	// Name is recorded in the memory's metadata.summarizer ("extractive", "llm:<model>").
	Name() string
}

// ExtractiveSummarizer is the deterministic summary (no model).
type ExtractiveSummarizer struct{}

// Summarize implements Summarizer.
func (ExtractiveSummarizer) Summarize(_ context.Context, f Facts) (string, error) {
	return Extractive(f), nil
}

// Name implements Summarizer.
func (ExtractiveSummarizer) Name() string { return "extractive" }

// LLMOptions configure the chat-completions summarizer.
type LLMOptions struct {
	BaseURL    string        // OPENAI_BASE_URL (default OpenAI's)
	APIKey     string        // OPENAI_API_KEY (may be empty for local servers)
	Model      string        // STRATA_LLM_MODEL (required)
	Timeout    time.Duration // per request [60s]
	MaxTokens  int           // [400]
	HTTPClient *http.Client
}

// LLM writes summaries through any OpenAI-compatible chat-completions endpoint.
type LLM struct {
	c *openai.Client
	o LLMOptions
}

// NewLLM checks the options; it does not call the server.
func NewLLM(o LLMOptions) (*LLM, error) {
	if o.Model == "" {
		return nil, errors.New("STRATA_LLM_MODEL is required for LLM summaries")
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 400
	}
	cfg := openai.DefaultConfig(o.APIKey)
	if o.BaseURL != "" {
		cfg.BaseURL = strings.TrimRight(o.BaseURL, "/")
	}
	cfg.HTTPClient = answercap.Client(o.HTTPClient) // answers read up to a limit each call sets
	return &LLM{c: openai.NewClientWithConfig(cfg), o: o}, nil
}

// Name implements Summarizer.
func (l *LLM) Name() string { return "llm:" + l.o.Model }

const systemPrompt = `You write the memory an AI agent reads before it starts a similar job.
Summarise the finished job described by the JSON below in at most 150 words of plain text:
the goal, how it ended, the settled parameters of each operation (copy every value exactly,
they will be reused), what was tried and discarded, the assets produced, and anything a
future run should do the same way or avoid. No preamble, no markdown, no invented facts.`

// Summarize implements Summarizer.
func (l *LLM) Summarize(ctx context.Context, f Facts) (string, error) {
	facts, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	if len(facts) > 48<<10 { // keep the prompt bounded for very long jobs
		f.Steps = f.Steps[:min(len(f.Steps), 20)]
		f.Assets = f.Assets[:min(len(f.Assets), 20)]
		f.Settled = f.Settled[:min(len(f.Settled), 40)]
		if facts, err = json.Marshal(f); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(answercap.WithLimit(ctx, answercap.ForTokens(l.o.MaxTokens), "model answer"), l.o.Timeout)
	defer cancel()
	resp, err := l.c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
		Model: l.o.Model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: systemPrompt},
			{Role: openai.ChatMessageRoleUser, Content: string(facts)},
		},
		MaxTokens:   l.o.MaxTokens,
		Temperature: 0,
	})
	if err != nil {
		return "", fmt.Errorf("LLM summary (%s): %w", l.o.Model, answercap.Describe("model", err))
	}
	if len(resp.Choices) == 0 {
		return "", fmt.Errorf("LLM summary (%s): no choices in the answer", l.o.Model)
	}
	text := strings.TrimSpace(resp.Choices[0].Message.Content)
	if text == "" {
		return "", fmt.Errorf("LLM summary (%s): empty answer", l.o.Model)
	}
	if strings.ContainsRune(text, 0) {
		text = strings.ReplaceAll(text, "\x00", "")
	}
	if r := []rune(text); len(r) > 8000 {
		text = string(r[:8000])
	}
	return text, nil
}
