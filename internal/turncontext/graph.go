package turncontext

import (
	"context"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/graph"
	"github.com/strata-mem/strata/internal/strata"
)

// Bounds of the graph section: the entities a query mentions and their relations in force.
const (
	maxGraphEntities  = 5
	maxGraphRelations = 12
)

// graphSection renders the entities the query mentions by name or alias (visible from the
// scope) with their relations in force written in a scope it sees (a relation written for
// another user about an org-level entity stays out), one item per entity, longest mention
// first; each item says which words of the query chose it. Two statements whatever the
// number of entities: the mentions, then their relations.
func (a *Assembler) graphSection(ctx context.Context, tx pgx.Tx, scope strata.Scope, query string, hide []string) (Section, error) {
	sec := Section{Name: SectionGraph, Header: "## People and things mentioned (relations in force)"}
	ms, err := a.d.Graph.Mentions(ctx, tx, scope.OrgID, graph.MentionQuery{Text: query, Scope: scope,
		Limit: maxGraphEntities, Hide: hide})
	if err != nil {
		return sec, err
	}
	if len(ms) == 0 {
		sec.Note = "the query mentions no entity of this scope"
		return sec, nil
	}
	ids := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		ids[i] = m.Entity.ID
	}
	rels, err := a.d.Graph.InForce(ctx, tx, scope.OrgID, graph.InForceQuery{IDs: ids, Scope: &scope,
		Per: maxGraphRelations, Hide: hide})
	if err != nil {
		return sec, err
	}
	for _, m := range ms {
		sec.Items = append(sec.Items, Item{ID: m.Entity.ID.String(), Order: len(sec.Items),
			Text: renderEntity(m.Entity, rels[m.Entity.ID]), Why: "mentioned: '" + Truncate(mentionedAs(query, m.Form), 100) + "'"})
	}
	return sec, nil
}

// renderEntity is one entity's item: a line naming it, then one line per relation.
func renderEntity(e graph.Entity, rels []graph.Relation) string {
	var b strings.Builder
	b.WriteString("- " + Truncate(e.Name, 200))
	var tags []string
	if e.Type != "" {
		tags = append(tags, Truncate(e.Type, 50))
	}
	var also []string
	for _, al := range e.Aliases {
		if graph.Normalize(al) != graph.Normalize(e.Name) && len(also) < 5 {
			also = append(also, Truncate(al, 100))
		}
	}
	if len(also) > 0 {
		tags = append(tags, "also: "+strings.Join(also, ", "))
	}
	if len(tags) > 0 {
		b.WriteString(" (" + strings.Join(tags, "; ") + ")")
	}
	if e.Summary != "" {
		b.WriteString(": " + Truncate(e.Summary, maxItemChars))
	}
	for _, r := range rels {
		line := r.Fact
		if line == "" {
			obj := r.ObjectName
			if r.ObjectValue != nil {
				obj = *r.ObjectValue
			}
			line = r.SubjectName + " " + r.Predicate + " " + obj
		}
		b.WriteString("\n  - " + Truncate(line, maxItemChars) + " (since " + r.ValidFrom.Format("2006-01-02") + ")")
	}
	return b.String()
}

// mentionedAs is the words of query that matched form (a normalised name or alias), as the
// query wrote them when they can be found, else the form.
func mentionedAs(query, form string) string {
	lq := strings.ToLower(query)
	if i := strings.Index(lq, form); i >= 0 && len(lq) == len(query) {
		return query[i : i+len(form)]
	}
	return form
}
