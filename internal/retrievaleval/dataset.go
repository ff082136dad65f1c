// Package retrievaleval measures retrieval quality against a running Strata server, as a user
// would see it and without a model: it writes each conversation's turns as memories through
// the HTTP API, asks each labelled question through POST /v1/memories/search and POST
// /v1/context, and scores what came back against the evidence turns — per category, beside an
// Okapi BM25 baseline over the same texts computed in the same run (docs/evaluation.md).
//
// It speaks HTTP only (through the Go client) and imports nothing of the server.
package retrievaleval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// The categories of the native layout, in report order.
const (
	SingleHop       = "single-hop"
	MultiHop        = "multi-hop"
	Temporal        = "temporal"
	Preference      = "preference"
	KnowledgeUpdate = "knowledge-update"
	Abstention      = "abstention"
)

// Categories lists the native categories in the order reports show them.
var Categories = []string{SingleHop, MultiHop, Temporal, Preference, KnowledgeUpdate, Abstention}

// Dataset is the native layout (eval/retrieval/conversations.json).
type Dataset struct {
	Conversations []Conversation `json:"conversations"`
	Questions     []Question     `json:"questions"`
}

// Conversation is one conversation: its turns are written as memories of one user.
type Conversation struct {
	ID       string    `json:"id"`
	UserID   string    `json:"user_id,omitempty"`
	Sessions []Session `json:"sessions"`
}

// Session is one dated sitting of a conversation.
type Session struct {
	ID    string    `json:"id"`
	Date  time.Time `json:"date"`
	Turns []Turn    `json:"turns"`
}

// Turn is one message.
type Turn struct {
	ID      string `json:"id"`
	Speaker string `json:"speaker"`
	Text    string `json:"text"`
}

// Question is one labelled question about one conversation. Evidence lists the turn ids that
// answer it; it is empty for abstention (the conversation never says).
type Question struct {
	ID           string     `json:"id"`
	Conversation string     `json:"conversation"`
	Question     string     `json:"question"`
	Answer       any        `json:"answer,omitempty"`
	Evidence     []string   `json:"evidence"`
	Category     string     `json:"category"`
	AskedAt      *time.Time `json:"asked_at,omitempty"`
}

// MemoryText is what a turn is written as: its speaker, a colon, its text.
func MemoryText(t Turn) string {
	if t.Speaker == "" {
		return t.Text
	}
	return t.Speaker + ": " + t.Text
}

// Load reads a data set in any of the layouts it knows — native, LoCoMo, LongMemEval — telling
// them apart by their fields, and checks it.
func Load(path string) (Dataset, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Dataset{}, "", err
	}
	ds, layout, err := Parse(raw)
	if err != nil {
		return Dataset{}, "", fmt.Errorf("%s: %w", path, err)
	}
	return ds, layout, nil
}

// Parse decodes raw in the layout it detects, and returns the layout's name.
func Parse(raw []byte) (Dataset, string, error) {
	raw = bytes.TrimSpace(raw)
	var ds Dataset
	var layout string
	switch {
	case len(raw) > 0 && raw[0] == '{':
		layout = "native"
		if err := json.Unmarshal(raw, &ds); err != nil {
			return ds, layout, fmt.Errorf("not the native layout ({\"conversations\": [...], \"questions\": [...]}): %w", err)
		}
	case len(raw) > 0 && raw[0] == '[':
		var probe []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &probe); err != nil {
			return ds, "", fmt.Errorf("a JSON array, but not of objects: %w", err)
		}
		if len(probe) == 0 {
			return ds, "", errors.New("an empty array: no conversations")
		}
		var err error
		switch {
		case probe[0]["conversation"] != nil && probe[0]["qa"] != nil:
			layout = "locomo"
			ds, err = parseLoCoMo(raw)
		case probe[0]["haystack_sessions"] != nil:
			layout = "longmemeval"
			ds, err = parseLongMemEval(raw)
		default:
			return ds, "", errors.New("an array of objects that are neither LoCoMo samples (conversation, qa) nor LongMemEval questions (haystack_sessions)")
		}
		if err != nil {
			return ds, layout, err
		}
	default:
		return ds, "", errors.New("not JSON: expected an object (native layout) or an array (LoCoMo, LongMemEval)")
	}
	return ds, layout, ds.Check()
}

// Check reports the first inconsistency: duplicate ids, a question about an unknown
// conversation, evidence naming an unknown turn, an abstention with evidence.
func (ds Dataset) Check() error {
	if len(ds.Conversations) == 0 {
		return errors.New("no conversations")
	}
	turns := map[string]string{} // turn id -> conversation
	convs := map[string]bool{}
	for i, c := range ds.Conversations {
		if c.ID == "" {
			return fmt.Errorf("conversations[%d].id is empty", i)
		}
		if convs[c.ID] {
			return fmt.Errorf("conversations[%d].id %q is used twice", i, c.ID)
		}
		convs[c.ID] = true
		for j, s := range c.Sessions {
			for k, t := range s.Turns {
				if t.ID == "" {
					return fmt.Errorf("conversations[%d].sessions[%d].turns[%d].id is empty", i, j, k)
				}
				if _, dup := turns[t.ID]; dup {
					return fmt.Errorf("conversations[%d].sessions[%d].turns[%d].id %q is used twice", i, j, k, t.ID)
				}
				turns[t.ID] = c.ID
			}
		}
	}
	for i, q := range ds.Questions {
		if !convs[q.Conversation] {
			return fmt.Errorf("questions[%d].conversation %q is not a conversation of the set", i, q.Conversation)
		}
		if q.Question == "" {
			return fmt.Errorf("questions[%d].question is empty", i)
		}
		if q.Category == Abstention && len(q.Evidence) > 0 {
			return fmt.Errorf("questions[%d].evidence must be empty for an abstention question", i)
		}
		if q.Category != Abstention && len(q.Evidence) == 0 {
			return fmt.Errorf("questions[%d].evidence is empty: only abstention questions have none", i)
		}
		for j, e := range q.Evidence {
			if turns[e] != q.Conversation {
				return fmt.Errorf("questions[%d].evidence[%d] %q is not a turn of conversation %q", i, j, e, q.Conversation)
			}
		}
	}
	return nil
}

// Subset keeps the first n conversations and their questions (n ≤ 0 keeps all).
func (ds Dataset) Subset(n int) Dataset {
	if n <= 0 || n >= len(ds.Conversations) {
		return ds
	}
	out := Dataset{Conversations: ds.Conversations[:n]}
	keep := map[string]bool{}
	for _, c := range out.Conversations {
		keep[c.ID] = true
	}
	for _, q := range ds.Questions {
		if keep[q.Conversation] {
			out.Questions = append(out.Questions, q)
		}
	}
	return out
}
