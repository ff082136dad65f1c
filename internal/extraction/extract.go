package extraction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	openai "github.com/sashabaranov/go-openai"

	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/keyvalue"
	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/policy"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/strata"
	"github.com/strata-mem/strata/internal/working"
)

// Namespace is the key-value namespace preferences go to.
const Namespace = "preferences"

// WorkerKey is the actor of extraction's writes when the turns name no API key.
const WorkerKey = "worker:extraction"

// Trust is the trust of everything extraction writes, whatever a turn says.
const Trust = "extracted"

// ErrNotConfigured: the server has no LLM (STRATA_LLM_MODEL unset).
var ErrNotConfigured = errors.New("extraction needs an LLM: set STRATA_LLM_MODEL (and OPENAI_BASE_URL for a server other than OpenAI's)")

// ErrDisabled: the org's policy turns extraction off ("extraction": {"enabled": false}, said
// by the org, not left unset); the on-demand extraction refuses before any model call.
var ErrDisabled = errors.New("extraction is off in this org's policy (extraction.enabled is false)")

// CheckEnabled refuses an on-demand extraction when the org's policy turns extraction off
// (policy.Extraction.Off; unset, only the background extraction is off): ErrDisabled.
func (x *Extractor) CheckEnabled(ctx context.Context, db pg.DBTX, org string) error {
	eff, err := policy.LoadEffective(ctx, db, org, x.Defaults)
	if err != nil {
		return err
	}
	if eff.Extraction.Off {
		return ErrDisabled
	}
	return nil
}

// RateLimitedError: the org used its LLM calls or tokens for this hour.
type RateLimitedError struct {
	Limit string        // "calls" or "tokens"
	Wait  time.Duration // until the next hour
}

func (e *RateLimitedError) Error() string {
	return "extraction: the org's hourly LLM " + e.Limit + " limit is used up; retry in " + e.Wait.Round(time.Second).String()
}

// Restricted reports whether a data subject's processing is restricted (GDPR Art. 18) on
// db (app wires internal/gdpr's check).
type Restricted func(ctx context.Context, db pg.DBTX, org, user string) (bool, error)

// Extractor extracts and applies memories. Build it with New.
type Extractor struct {
	Pool     *pgxpool.Pool
	Semantic *semantic.Store
	KV       *keyvalue.Store
	Working  *working.Store
	// Graph, when set, receives the entities and relations of every answer (issue 43); nil
	// leaves the graph alone (the answer's graph part is validated and reported only).
	Graph *graph.Store
	// EntitySimilarity is the cosine similarity of name + summary embeddings above which a
	// new entity is taken to be a known entity of the same scope [0.9].
	EntitySimilarity float64
	Embedder         embed.Embedder
	Restricted       Restricted
	Defaults         policy.LifecyclePolicy
	Log              *slog.Logger
	Metrics          *Metrics // nil: not counted
	Now              func() time.Time
	// ApplyPause sleeps between applied decisions of a background run
	// (STRATA_EXTRACTION_APPLY_PAUSE; the crash test kills the server inside an apply).
	ApplyPause time.Duration

	client *openai.Client
	o      LLMOptions
}

// New returns an extractor calling the model o names; without o.Model it returns nil and
// ErrNotConfigured (extraction is off).
func New(o LLMOptions, x Extractor) (*Extractor, error) {
	if o.Model == "" {
		return nil, ErrNotConfigured
	}
	x.o, x.client = o, newClient(o)
	if x.Log == nil {
		x.Log = slog.New(slog.DiscardHandler)
	}
	return &x, nil
}

func (x *Extractor) now() time.Time {
	if x.Now != nil {
		return x.Now().UTC().Truncate(time.Microsecond)
	}
	return time.Now().UTC().Truncate(time.Microsecond)
}

func (x *Extractor) attempts() int {
	if x.o.Attempts > 0 {
		return x.o.Attempts
	}
	return 3
}

func (x *Extractor) timeout() time.Duration {
	if x.o.Timeout > 0 {
		return x.o.Timeout
	}
	return 60 * time.Second
}

func (x *Extractor) maxTokens() int {
	if x.o.MaxTokens > 0 {
		return x.o.MaxTokens
	}
	return 1500
}

// DefaultModel is the server's model (STRATA_LLM_MODEL).
func (x *Extractor) DefaultModel() string { return x.o.Model }

// Turn is one turn to extract from. Seq is the session's seq (or the message's 1-based
// position for messages sent to POST /v1/memories/extract); WrittenBy the key that wrote it.
type Turn struct {
	Seq       int64  `json:"seq"`
	Role      string `json:"role"`
	Content   string `json:"content"`
	WrittenBy string `json:"-"`
}

// Request is one extraction: turns of one scope.
type Request struct {
	Org       string
	UserID    string // the data subject; facts and preferences are written at their level
	AgentID   string // the agent the turns were with (provenance; quarantine by agent)
	SessionID string // the session the turns belong to ("" for messages sent in a request)
	Turns     []Turn
	// KeyID is the caller: the actor for turns that name no writer.
	KeyID string
	// Model overrides the org's model (the org policy's extraction.model, else the server's).
	Model string

	// Set by ExtractGraph: the graph is written in this exact scope (a memory's), every
	// relation with this memory as its source, and the answer's decisions are not applied.
	graphScope   *strata.Scope
	sourceMemory *uuid.UUID
}

// Decision is one thing the model decided, and what applying it did.
type Decision struct {
	Op       string     `json:"op" enum:"add,update,delete,noop" doc:"add: a new fact or preference; update: a new version superseding the old; delete: the fact or preference retracted (history kept); noop: already known."`
	Kind     string     `json:"kind" enum:"fact,preference"`
	Text     string     `json:"text,omitempty" doc:"The fact, or the preference's value."`
	Key      string     `json:"key,omitempty" doc:"The preference key (namespace preferences)."`
	MemoryID *uuid.UUID `json:"memory_id,omitempty" doc:"The existing memory an update, delete or noop is about."`
	Turns    []int64    `json:"turns" doc:"The turn seqs it came from."`
	// What applying it did (absent on a dry run).
	Result         string     `json:"result,omitempty" enum:"added,deduplicated,updated,retracted,unchanged,skipped,quarantined" doc:"skipped: nothing to do (the preference already had this value, or no user to hold it); quarantined: not applied, a writer of the batch's turns is quarantined and this cannot be held (a preference, a retraction)."`
	ResultMemoryID *uuid.UUID `json:"result_memory_id,omitempty" doc:"The memory version written (or the duplicate it was folded into)."`
	KVVersion      int64      `json:"kv_version,omitempty" doc:"The preference's version after the write."`

	vector []float32
}

// Entity is an entity the model named, and what applying it did.
type Entity struct {
	Name    string   `json:"name"`
	Type    string   `json:"type,omitempty"`
	Aliases []string `json:"aliases"`
	Summary string   `json:"summary,omitempty"`
	// What applying it did (absent on a dry run).
	Result   string     `json:"result,omitempty" enum:"created,resolved,quarantined" doc:"created: a new entity; resolved: a known entity (by name or alias, embedding similarity, or the model's ref) took the forms it did not know; quarantined: not written, a writer of the turns is quarantined."`
	EntityID *uuid.UUID `json:"entity_id,omitempty"`
	// Merged are known entities this answer showed to be the same one (its forms named each
	// of them): merged into EntityID, kept as tombstones.
	Merged []uuid.UUID `json:"merged,omitempty" doc:"Known entities the answer showed to be this one (its name and aliases named each), merged into it."`

	known  *uuid.UUID // the entity the model's ref named
	vector []float32
}

// Relation is a relation the model named, and what applying it did.
type Relation struct {
	Subject    string     `json:"subject"`
	Predicate  string     `json:"predicate"`
	Object     string     `json:"object,omitempty" doc:"The object entity's name (or value)."`
	Value      string     `json:"value,omitempty" doc:"A literal object."`
	Functional bool       `json:"functional"`
	ValidFrom  *time.Time `json:"valid_from,omitempty"`
	Fact       string     `json:"fact,omitempty"`
	Turns      []int64    `json:"turns"`
	// What applying it did (absent on a dry run).
	Result         string      `json:"result,omitempty" enum:"added,unchanged,skipped,quarantined" doc:"unchanged: the same relation was already in force; skipped: its subject and object resolved to one entity; quarantined: not written, a writer of the turns is quarantined."`
	RelationID     *uuid.UUID  `json:"relation_id,omitempty"`
	SourceMemoryID *uuid.UUID  `json:"source_memory_id,omitempty" doc:"The memory written by the decision the relation came with."`
	Closed         []uuid.UUID `json:"closed,omitempty" doc:"Relations in force it contradicted and closed (valid_to set, history kept)."`

	subj, obj int // indexes into Decisions.Entities (obj -1: Value)
	decision  int // index into Decisions.Decisions, or -1
}

// Decisions is an extraction's answer.
type Decisions struct {
	Model         string     `json:"model"`
	PromptVersion string     `json:"prompt_version"`
	Decisions     []Decision `json:"decisions"`
	Entities      []Entity   `json:"entities" doc:"The entities of the turns (graph memory, docs/graph.md), in the request's scope."`
	Relations     []Relation `json:"relations" doc:"The relations between them, with their provenance."`
	Usage         Usage      `json:"usage"`
	Applied       bool       `json:"applied" doc:"False on a dry run."`
}

// Counts tallies decisions by op (audit and metrics; no content).
func (d Decisions) Counts() map[string]int {
	c := map[string]int{"add": 0, "update": 0, "delete": 0, "noop": 0}
	for _, x := range d.Decisions {
		c[x.Op]++
	}
	return c
}

// factScope is where a request's facts live: the user's level when there is a user (facts
// outlive the session), otherwise the session's own scope.
func (r Request) factScope() strata.Scope {
	if r.graphScope != nil {
		return *r.graphScope
	}
	if r.UserID != "" {
		return strata.Scope{OrgID: r.Org, UserID: r.UserID}
	}
	return strata.Scope{OrgID: r.Org, AgentID: r.AgentID, SessionID: r.SessionID}
}

// prefScope is where preferences live: user level (or the session's when there is no user).
func (r Request) prefScope() strata.Scope { return r.factScope() }

func (x *Extractor) check(r Request) error {
	if r.Org == "" {
		return errors.New("extraction: empty org")
	}
	if len(r.Turns) == 0 {
		return strata.Invalid("messages", "there are no turns to extract from")
	}
	for f, v := range map[string]string{"user_id": r.UserID, "agent_id": r.AgentID, "session_id": r.SessionID} {
		if err := strata.CheckID(f, v, true); err != nil {
			return err
		}
	}
	return nil
}

// modelFor is the model an org's extraction asks.
func (x *Extractor) modelFor(ctx context.Context, db pg.DBTX, r Request) (string, policy.Extraction, error) {
	eff, err := policy.LoadEffective(ctx, db, r.Org, x.Defaults)
	if err != nil {
		return "", policy.Extraction{}, err
	}
	m := cmpOr(r.Model, eff.Extraction.Model, x.o.Model)
	return m, eff.Extraction, nil
}

func cmpOr(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// Extract asks the model what to remember from r's turns and validates its answer. It
// reads on tx (bound to r.Org) — the subject's restriction, the memories and preferences
// shown to the model — and writes nothing but the org's usage counters (on their own
// transaction, so a call is counted even when the caller rolls back). A restricted subject
// is strata.ErrRestricted before any call.
func (x *Extractor) Extract(ctx context.Context, tx pgx.Tx, r Request) (Decisions, error) {
	if err := x.check(r); err != nil {
		return Decisions{}, err
	}
	if x.Restricted != nil && r.UserID != "" {
		restricted, err := x.Restricted(ctx, tx, r.Org, r.UserID)
		if err != nil {
			return Decisions{}, err
		}
		if restricted {
			return Decisions{}, strata.ErrRestricted
		}
	}
	model, rules, err := x.modelFor(ctx, tx, r)
	if err != nil {
		return Decisions{}, err
	}
	out := Decisions{Model: model, PromptVersion: PromptVersion, Decisions: []Decision{}, Entities: []Entity{},
		Relations: []Relation{}}

	// What the model is shown: the batch's turns, and the memories and preferences of the
	// exact scope the results are written to (nothing else can be named in an answer).
	doc := promptDoc{Memories: []promptMemory{}, Preferences: []promptPref{}, Entities: []promptEntity{}}
	seqs := map[int64]bool{}
	var query strings.Builder
	for _, t := range r.Turns {
		doc.Turns = append(doc.Turns, promptTurn{Seq: t.Seq, Role: t.Role, Content: t.Content})
		seqs[t.Seq] = true
		if t.Role == "user" || query.Len() < 2000 {
			query.WriteString(t.Content)
			query.WriteString("\n")
		}
	}
	sc := r.factScope()
	refs := map[string]bool{}
	refIDs := map[string]uuid.UUID{}
	q := query.String()
	if len([]rune(q)) > 4000 {
		q = string([]rune(q)[:4000])
	}
	vecs, err := x.Embedder.Embed(ctx, []string{q})
	if err != nil {
		return Decisions{}, fmt.Errorf("extraction: embedding the turns: %w", err)
	}
	sp := x.space()
	hits, _, err := x.Semantic.Search(ctx, tx, semantic.Query{Scope: sc, Text: q, Vector: vecs[0], Space: sp,
		Kinds: []string{semantic.KindFact}, TopK: 30})
	if err != nil {
		return Decisions{}, err
	}
	for _, h := range hits {
		m := h.Memory
		if m.UserID != sc.UserID || m.AgentID != sc.AgentID || m.SessionID != sc.SessionID {
			continue // visible to the scope but not of it: never a target
		}
		ref := "m" + strconv.Itoa(len(refIDs)+1)
		refs[ref], refIDs[ref] = true, m.ID
		doc.Memories = append(doc.Memories, promptMemory{Ref: ref, Text: m.Text})
	}
	prefs := map[string]bool{}
	prefValues := map[string]string{}
	entries, err := x.KV.ListOn(ctx, tx, Namespace, r.prefScope(), false, "", 200)
	if err != nil && !errors.Is(err, strata.ErrNotFound) {
		return Decisions{}, err
	}
	for _, e := range entries {
		v := prefValue(e.Value)
		prefs[e.Key], prefValues[e.Key] = true, v
		doc.Preferences = append(doc.Preferences, promptPref{Key: e.Key, Value: v})
	}

	// The entities of the exact scope the graph is written to that the turns bring up: the
	// model may name one (e1, e2, ...) instead of describing it again.
	entityRefs := map[string]bool{}
	entityIDs := map[string]uuid.UUID{}
	if x.Graph != nil {
		found, err := x.Graph.Search(ctx, tx, r.Org, graph.SearchQuery{Scope: &sc, Text: q, Vector: vecs[0],
			Space: graph.Space(sp), Limit: 20})
		if err != nil {
			return Decisions{}, fmt.Errorf("extraction: reading known entities: %w", err)
		}
		for _, f := range found {
			e := f.Entity
			if e.UserID != sc.UserID || e.AgentID != sc.AgentID || e.SessionID != sc.SessionID {
				continue
			}
			ref := "e" + strconv.Itoa(len(entityIDs)+1)
			entityRefs[ref], entityIDs[ref] = true, e.ID
			doc.Entities = append(doc.Entities, promptEntity{Ref: ref, Name: e.Name, Type: e.Type, Aliases: e.Aliases,
				Summary: e.Summary})
		}
	}

	before := func() error { return x.checkUsage(ctx, r.Org, rules) }
	after := func(u Usage) { x.addUsage(ctx, r.Org, u) }
	ans, usage, err := x.ask(ctx, model, doc, refs, prefs, seqs, entityRefs, before, after)
	out.Usage = usage
	x.Metrics.call(usage)
	if err != nil {
		return out, err
	}
	var texts []string
	var textAt []int
	for _, d := range ans.Decisions {
		dd := Decision{Op: strings.ToLower(d.Op), Kind: d.Kind, Text: strings.TrimSpace(d.Text), Turns: slices.Clone(d.Turns)}
		slices.Sort(dd.Turns)
		dd.Turns = slices.Compact(dd.Turns)
		if dd.Turns == nil {
			dd.Turns = []int64{}
		}
		if d.Kind == "preference" {
			dd.Key = d.Key
			if dd.Op == "add" && prefs[d.Key] {
				dd.Op = "update"
			}
			if dd.Op == "update" && !prefs[d.Key] {
				dd.Op = "add"
			}
			if dd.Op == "delete" {
				dd.Text = ""
			}
		} else if d.Ref != "" {
			id := refIDs[d.Ref]
			dd.MemoryID = &id
			if dd.Op == "delete" || dd.Op == "noop" {
				dd.Text = ""
			}
		}
		if dd.Kind == "fact" && (dd.Op == "add" || dd.Op == "update") {
			texts = append(texts, dd.Text)
			textAt = append(textAt, len(out.Decisions))
		}
		out.Decisions = append(out.Decisions, dd)
	}
	for i, e := range ans.Entities {
		ee := Entity{Name: entityForms(e.Name), Type: e.Type, Summary: e.Summary, Aliases: []string{}}
		if ee.Name == "" {
			ee.Name = e.Name
		}
		for _, a := range append([]string{e.Name}, e.Aliases...) {
			if a = entityForms(a); a != "" && graph.Normalize(a) != graph.Normalize(ee.Name) &&
				!slices.ContainsFunc(ee.Aliases, func(b string) bool { return graph.Normalize(a) == graph.Normalize(b) }) {
				ee.Aliases = append(ee.Aliases, a)
			}
		}
		if e.Ref != "" {
			id := entityIDs[e.Ref]
			ee.known = &id
		}
		texts = append(texts, entityText(ee))
		textAt = append(textAt, -1-i)
		out.Entities = append(out.Entities, ee)
	}
	for i, rr := range ans.Relations {
		rel := Relation{Subject: out.Entities[ans.subj[i]].Name, Predicate: graph.NormalizePredicate(rr.Predicate),
			Value: rr.Value, Functional: rr.Functional, ValidFrom: ans.validFrom[i], Fact: rr.Fact,
			Turns: slices.Clone(rr.Turns), subj: ans.subj[i], obj: ans.obj[i], decision: *rr.Decision}
		if rel.obj >= 0 {
			rel.Object = out.Entities[rel.obj].Name
		}
		slices.Sort(rel.Turns)
		rel.Turns = slices.Compact(rel.Turns)
		out.Relations = append(out.Relations, rel)
	}
	if len(texts) > 0 {
		vs, err := x.Embedder.Embed(ctx, texts)
		if err != nil {
			return out, fmt.Errorf("extraction: embedding the facts and entities: %w", err)
		}
		for i, at := range textAt {
			if at < 0 {
				out.Entities[-1-at].vector = vs[i]
			} else {
				out.Decisions[at].vector = vs[i]
			}
		}
	}
	return out, nil
}

// GraphMemory is a memory whose entities and relations ExtractGraph adds to the graph.
type GraphMemory struct {
	Scope    strata.Scope // the memory's scope: the graph is written in it
	MemoryID uuid.UUID
	Text     string
	KeyID    string // the writer (provenance; quarantine by key)
	AgentID  string // the writing agent (provenance; quarantine by agent)
}

// ExtractGraph asks the model, in one call, for the entities and relations of one memory's
// text (POST /v1/memories with "graph": true) and writes them on tx in the memory's exact
// scope, every relation with the memory as its source. The answer's memory decisions are
// discarded: the caller wrote the memory itself. A restricted subject is
// strata.ErrRestricted before any call; a malformed answer is ErrMalformed and nothing is
// written.
func (x *Extractor) ExtractGraph(ctx context.Context, tx pgx.Tx, m GraphMemory) (Decisions, error) {
	if x.Graph == nil {
		return Decisions{}, errors.New("extraction: no graph store")
	}
	sc := m.Scope
	r := Request{Org: sc.OrgID, UserID: sc.UserID, AgentID: cmpOr(m.AgentID, sc.AgentID), SessionID: sc.SessionID,
		KeyID: m.KeyID, Turns: []Turn{{Seq: 1, Role: "user", Content: m.Text, WrittenBy: m.KeyID}},
		graphScope: &sc, sourceMemory: &m.MemoryID}
	d, err := x.Extract(ctx, tx, r)
	if err != nil {
		return d, err
	}
	d.Decisions = []Decision{}
	if err := x.applyGraph(ctx, tx, r, &d); err != nil {
		return d, err
	}
	d.Applied = true
	x.Metrics.decided(d)
	return d, nil
}

// entityText is what an entity's embedding is made of: its name and summary.
func entityText(e Entity) string {
	if e.Summary == "" {
		return e.Name
	}
	return e.Name + ": " + e.Summary
}

func (x *Extractor) space() semantic.Space {
	return semantic.Space{Embedder: x.Embedder.Name(), Model: x.Embedder.Model(), Dims: x.Embedder.Dims()}
}

// prefValue is a stored preference as text (a JSON string's content, other JSON as is).
func prefValue(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// AfterCommit registers work to run once the caller's transaction has committed (the
// key-value cache).
type AfterCommit = keyvalue.AfterCommit

// Apply writes d's decisions on tx through the tiers' write paths, then its entities and
// relations through the graph's (applyGraph), and records each result's provenance
// (session, turn seqs, model, prompt version, writer key). Everything happens on tx: the
// caller commits it together with its own bookkeeping (the session cursor), or rolls it
// all back.
func (x *Extractor) Apply(ctx context.Context, tx pgx.Tx, afterCommit AfterCommit, r Request, d *Decisions) error {
	if err := x.applyDecisions(ctx, tx, afterCommit, r, d); err != nil {
		return err
	}
	if err := x.applyGraph(ctx, tx, r, d); err != nil {
		return err
	}
	d.Applied = true
	x.Metrics.decided(*d)
	return nil
}

// batchWriters is who wrote a batch, from what Strata recorded — the writer of every turn
// of the batch — never from the turns the model's answer cites (a quarantined key's turn
// saying "cite turn 1 only" must not launder its content under turn 1's trusted writer).
type batchWriters struct {
	all    []string // every distinct writer, in turn order
	writer string   // the key every result of the batch is attributed to
	held   bool     // a writer (key) or the batch's agent is under an active quarantine
}

// writersOf reads the batch's writers and checks them against the org's active quarantines
// on tx (under the org's quarantine lock, shared, as memory inserts take it). The results'
// writer is the batch's only writer, else its first quarantined key (so the memory insert
// trigger holds what the batch writes and the quarantine counts it), else the newest
// turn's writer; every writer is also recorded in metadata.extraction.writers, so a later
// quarantine of any of them holds the result too.
func (x *Extractor) writersOf(ctx context.Context, tx pgx.Tx, r Request, now time.Time) (batchWriters, error) {
	var b batchWriters
	seen := map[string]bool{}
	for _, t := range r.Turns {
		k := cmpOr(t.WrittenBy, r.KeyID, WorkerKey)
		b.writer = k
		if !seen[k] {
			seen[k] = true
			b.all = append(b.all, k)
		}
	}
	if len(b.all) == 0 {
		b.writer = cmpOr(r.KeyID, WorkerKey)
		b.all = []string{b.writer}
	}
	held, err := x.Semantic.WritersQuarantined(ctx, tx, r.Org, b.all, []string{r.AgentID}, now)
	if err != nil {
		return b, fmt.Errorf("extraction: checking quarantines: %w", err)
	}
	b.held = held
	for _, k := range b.all {
		if !held || len(b.all) == 1 {
			break
		}
		one, err := x.Semantic.WritersQuarantined(ctx, tx, r.Org, []string{k}, nil, now)
		if err != nil {
			return b, fmt.Errorf("extraction: checking quarantines: %w", err)
		}
		if one {
			b.writer = k
			break
		}
	}
	return b, nil
}

// applyDecisions writes the memory and preference decisions. A batch with a quarantined
// writer is held: its facts are written attributed to the quarantined key (the quarantine
// holds them: not served until a release, removed by a purge); what cannot be held —
// preferences (key-value memory has no held state), and retractions and updates of existing
// facts (an update supersedes the current version) — is not applied (result "quarantined").
func (x *Extractor) applyDecisions(ctx context.Context, tx pgx.Tx, afterCommit AfterCommit, r Request, d *Decisions) error {
	sc, psc := r.factScope(), r.prefScope()
	now := x.now()
	sp := x.space()
	if len(d.Decisions) == 0 {
		return nil
	}
	bw, err := x.writersOf(ctx, tx, r, now)
	if err != nil {
		return err
	}
	for i := range d.Decisions {
		dd := &d.Decisions[i]
		meta := map[string]any{"extraction": map[string]any{"session_id": r.SessionID, "turns": dd.Turns,
			"model": d.Model, "prompt_version": d.PromptVersion, "writers": bw.all}}
		prov := semantic.Provenance{KeyID: bw.writer, AgentID: r.AgentID}
		var memID *uuid.UUID
		var kvVersion *int64
		// An update supersedes the current version: held, it would still retract the
		// trusted one (issue 57 item 2 follow-up), so it is not applied either.
		if bw.held && (dd.Kind == "preference" || dd.Op == "delete" || dd.Op == "update") && dd.Op != "noop" {
			dd.Result = "quarantined"
			continue
		}
		switch {
		case dd.Kind == "fact" && dd.Op == "add":
			m, dup, err := x.Semantic.Create(ctx, tx, semantic.NewMemory{Scope: sc, Kind: semantic.KindFact, Text: dd.Text,
				Metadata: meta, Importance: 0.5, Trust: Trust, Provenance: prov, Vector: dd.vector, Space: sp})
			if err != nil {
				return fmt.Errorf("extraction: adding a fact: %w", err)
			}
			dd.Result, dd.ResultMemoryID = "added", &m.ID
			if dup != nil {
				dd.Result = "deduplicated"
			}
			memID = &m.ID
		case dd.Kind == "fact" && dd.Op == "update":
			trust := Trust
			m, err := x.Semantic.Supersede(ctx, tx, r.Org, *dd.MemoryID, semantic.Patch{Text: &dd.Text, Metadata: meta,
				Trust: &trust, Provenance: prov, Vector: dd.vector, Space: sp})
			if err != nil {
				return fmt.Errorf("extraction: updating a fact: %w", err)
			}
			dd.Result, dd.ResultMemoryID, memID = "updated", &m.ID, &m.ID
		case dd.Kind == "fact" && dd.Op == "delete":
			m, err := x.Semantic.Retract(ctx, tx, r.Org, *dd.MemoryID)
			if err != nil {
				return fmt.Errorf("extraction: retracting a fact: %w", err)
			}
			dd.Result, dd.ResultMemoryID, memID = "retracted", &m.ID, &m.ID
		case dd.Op == "noop":
			dd.Result = "unchanged"
			continue
		case dd.Kind == "preference" && (dd.Op == "add" || dd.Op == "update"):
			val, _ := json.Marshal(dd.Text)
			e, _, err := x.KV.Put(ctx, tx, afterCommit, keyvalue.WriteInput{Namespace: Namespace, Key: dd.Key, Scope: psc,
				Value: val, Actor: bw.writer})
			if err != nil {
				return fmt.Errorf("extraction: writing a preference: %w", err)
			}
			dd.Result, dd.KVVersion = map[string]string{"add": "added", "update": "updated"}[dd.Op], e.Version
			kvVersion = &e.Version
		case dd.Kind == "preference" && dd.Op == "delete":
			e, err := x.KV.Delete(ctx, tx, afterCommit, Namespace, dd.Key, psc, nil, bw.writer)
			if errors.Is(err, strata.ErrNotFound) {
				dd.Result = "skipped"
				continue
			}
			if err != nil {
				return fmt.Errorf("extraction: deleting a preference: %w", err)
			}
			dd.Result, dd.KVVersion = "retracted", e.Version
			kvVersion = &e.Version
		default:
			return fmt.Errorf("extraction: unknown decision %s/%s", dd.Kind, dd.Op)
		}
		var ns, key *string
		if kvVersion != nil {
			n, k := Namespace, dd.Key
			ns, key = &n, &k
		}
		if _, err := tx.Exec(ctx, `INSERT INTO extraction_provenance (org_id, op, memory_id, kv_namespace, kv_key, kv_version,
				user_id, agent_id, session_id, turn_seqs, model, prompt_version, written_by, created_at, writers)
			VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), nullif($8, ''), nullif($9, ''), $10, $11, $12, $13, $14, $15)`,
			r.Org, dd.Op, memID, ns, key, kvVersion, r.UserID, r.AgentID, r.SessionID, dd.Turns, d.Model, d.PromptVersion,
			bw.writer, now, bw.all); err != nil {
			return pg.Interpret(err)
		}
	}
	return nil
}

func (x *Extractor) similarity() float64 {
	if x.EntitySimilarity > 0 {
		return x.EntitySimilarity
	}
	return 0.9
}

// applyGraph resolves d's entities and adds its relations, in the request's fact scope
// only (the answer cannot name another: its schema has no scope fields, and the known
// entities it may name by ref are of this scope). Entities first, under the scope's lock
// (one lock for the whole batch: the similarity reads and the resolutions see every
// committed entity and no writer slips between them), then relations.
func (x *Extractor) applyGraph(ctx context.Context, tx pgx.Tx, r Request, d *Decisions) error {
	if x.Graph == nil || len(d.Entities) == 0 {
		return nil
	}
	sc := r.factScope()
	sp := graph.Space(x.space())
	now := x.now()
	// The memory each entity came with: the first relation naming it that came with a decision.
	sources := make([]*uuid.UUID, len(d.Entities))
	for i := range d.Relations {
		m := x.relationMemory(r, d, i)
		for _, at := range []int{d.Relations[i].subj, d.Relations[i].obj} {
			if m != nil && at >= 0 && sources[at] == nil {
				sources[at] = m
			}
		}
	}
	// Quarantine: memories a quarantined key or agent writes are held (hidden until a
	// release); the graph has no held state, so the graph part of a batch any quarantined
	// writer contributed to — the writer of any turn of the batch, whatever turns the
	// answer cites — is not written at all.
	bw, err := x.writersOf(ctx, tx, r, now)
	if err != nil {
		return err
	}
	if bw.held {
		for i := range d.Entities {
			d.Entities[i].Result = "quarantined"
		}
		for i := range d.Relations {
			d.Relations[i].Result = "quarantined"
		}
		return nil
	}
	if err := x.Graph.LockScope(ctx, tx, sc); err != nil {
		return fmt.Errorf("extraction: locking the scope's entities: %w", err)
	}
	for i := range d.Entities {
		e := &d.Entities[i]
		name, aliases := e.Name, e.Aliases
		target, err := x.knownEntity(ctx, tx, r.Org, sc, sp, e)
		if err != nil {
			return err
		}
		if target != nil && graph.Normalize(target.Name) != graph.Normalize(name) {
			aliases = append([]string{name}, aliases...)
			name = target.Name
		}
		if e.Merged, err = x.mergeNamed(ctx, tx, r.Org, sc, target, name, aliases); err != nil {
			return err
		}
		in := graph.ResolveInput{Scope: sc, Name: name, Type: e.Type, Aliases: aliases, Summary: e.Summary,
			SourceMemoryID: sources[i]}
		// A vector of a bare name must not replace a known entity's name + summary vector.
		if e.Summary != "" && e.vector != nil {
			in.Vector, in.Space = e.vector, sp
		}
		ent, created, err := x.Graph.Resolve(ctx, tx, in)
		if err != nil {
			return fmt.Errorf("extraction: resolving an entity: %w", err)
		}
		if created && in.Vector == nil && e.vector != nil {
			in.Vector, in.Space, in.SourceMemoryID = e.vector, sp, nil
			if ent, _, err = x.Graph.Resolve(ctx, tx, in); err != nil {
				return fmt.Errorf("extraction: embedding an entity: %w", err)
			}
		}
		e.EntityID, e.Result = &ent.ID, "resolved"
		if created {
			e.Result = "created"
		}
	}
	for i := range d.Relations {
		rel := &d.Relations[i]
		in := graph.RelationInput{Scope: sc, SubjectID: *d.Entities[rel.subj].EntityID, Predicate: rel.Predicate,
			Functional: rel.Functional, Fact: rel.Fact, ValidFrom: rel.ValidFrom,
			Provenance: graph.Provenance{MemoryID: x.relationMemory(r, d, i), KeyID: bw.writer, AgentID: r.AgentID,
				Writers: bw.all}}
		if rel.obj >= 0 {
			in.ObjectID = d.Entities[rel.obj].EntityID
			if *in.ObjectID == in.SubjectID { // two names of the answer resolved to one entity
				rel.Result = "skipped"
				continue
			}
		} else {
			v := rel.Value
			in.ObjectValue = &v
		}
		res, err := x.Graph.AddRelation(ctx, tx, in)
		if err != nil {
			return fmt.Errorf("extraction: adding a relation: %w", err)
		}
		rel.RelationID, rel.SourceMemoryID, rel.Closed = &res.Relation.ID, in.Provenance.MemoryID, res.Closed
		rel.Result = "unchanged"
		if !res.Created {
			continue
		}
		rel.Result = "added"
		if _, err := tx.Exec(ctx, `INSERT INTO extraction_provenance (org_id, op, memory_id, relation_id,
				user_id, agent_id, session_id, turn_seqs, model, prompt_version, written_by, created_at)
			VALUES ($1, 'add', $2, $3, nullif($4, ''), nullif($5, ''), nullif($6, ''), $7, $8, $9, $10, $11)`,
			r.Org, in.Provenance.MemoryID, res.Relation.ID, r.UserID, r.AgentID, r.SessionID, rel.Turns, d.Model,
			d.PromptVersion, bw.writer, now); err != nil {
			return pg.Interpret(err)
		}
	}
	return nil
}

// mergeNamed merges the known entities of sc that name and aliases name — "Ana Silva"
// with the alias "Ana" when "Ana" and "Ana Silva" were resolved apart earlier — into one, so
// Resolve then finds a single entity: the model's answer is that they are the same. The
// survivor is target (the model's ref or the similar entity), else the entity whose name
// is name, else the oldest. The caller holds the scope's lock.
func (x *Extractor) mergeNamed(ctx context.Context, tx pgx.Tx, org string, sc strata.Scope, target *graph.Entity,
	name string, aliases []string) ([]uuid.UUID, error) {
	var found []graph.Entity
	seen := map[uuid.UUID]bool{}
	if target != nil {
		found, seen[target.ID] = append(found, *target), true
	}
	for _, f := range append([]string{name}, aliases...) {
		es, err := x.Graph.Lookup(ctx, tx, org, graph.LookupQuery{Name: f, Scope: &sc, Limit: 20})
		if err != nil {
			return nil, fmt.Errorf("extraction: looking up an entity: %w", err)
		}
		for _, g := range es {
			if !seen[g.ID] && g.UserID == sc.UserID && g.AgentID == sc.AgentID && g.SessionID == sc.SessionID {
				found, seen[g.ID] = append(found, g), true
			}
		}
	}
	if len(found) < 2 {
		return nil, nil
	}
	survivor := found[0]
	if target == nil {
		slices.SortStableFunc(found, func(a, b graph.Entity) int { return a.CreatedAt.Compare(b.CreatedAt) })
		survivor = found[0]
		for _, g := range found {
			if graph.Normalize(g.Name) == graph.Normalize(name) {
				survivor = g
				break
			}
		}
	}
	var merged []uuid.UUID
	for _, g := range found {
		if g.ID == survivor.ID {
			continue
		}
		if _, err := x.Graph.Merge(ctx, tx, org, survivor.ID, g.ID); err != nil {
			return nil, fmt.Errorf("extraction: merging entities the answer named as one: %w", err)
		}
		merged = append(merged, g.ID)
	}
	return merged, nil
}

// relationMemory is the memory version written by the decision relation i came with (nil:
// none, or a retraction).
func (x *Extractor) relationMemory(r Request, d *Decisions, i int) *uuid.UUID {
	if r.sourceMemory != nil {
		return r.sourceMemory
	}
	at := d.Relations[i].decision
	if at < 0 || at >= len(d.Decisions) {
		return nil
	}
	dd := d.Decisions[at]
	if dd.Kind != "fact" || (dd.Result != "added" && dd.Result != "deduplicated" && dd.Result != "updated") {
		return nil
	}
	return dd.ResultMemoryID
}

// knownEntity is the known entity of sc that e is, by the model's answer (its ref) or by
// embedding similarity of name + summary (nil: neither; Resolve then matches names and
// aliases, or creates it). The caller holds the scope's lock.
func (x *Extractor) knownEntity(ctx context.Context, tx pgx.Tx, org string, sc strata.Scope, sp graph.Space, e *Entity) (*graph.Entity, error) {
	ofScope := func(g graph.Entity) bool {
		return g.MergedInto == nil && g.UserID == sc.UserID && g.AgentID == sc.AgentID && g.SessionID == sc.SessionID
	}
	if e.known != nil {
		g, err := x.Graph.Get(ctx, tx, org, *e.known)
		for i := 0; err == nil && g.MergedInto != nil && i < 8; i++ {
			g, err = x.Graph.Get(ctx, tx, org, *g.MergedInto)
		}
		switch {
		case errors.Is(err, strata.ErrNotFound):
		case err != nil:
			return nil, err
		case ofScope(g):
			return &g, nil
		}
	}
	if e.vector == nil {
		return nil, nil
	}
	hits, err := x.Graph.Search(ctx, tx, org, graph.SearchQuery{Scope: &sc, Text: e.Name, Vector: e.vector, Space: sp, Limit: 5})
	if err != nil {
		return nil, fmt.Errorf("extraction: matching an entity: %w", err)
	}
	for _, h := range hits {
		if !ofScope(h.Entity) {
			continue
		}
		if h.Exact {
			return nil, nil // its name or an alias: Resolve finds it
		}
		if h.Similarity != nil && *h.Similarity >= x.similarity() {
			return &h.Entity, nil
		}
	}
	return nil, nil
}
