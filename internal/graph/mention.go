package graph

import (
	"context"
	"strings"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Limits of mention matching (the per-turn context's graph section).
const (
	maxMentionWords = 5    // the longest name or alias matched, in words
	maxMentionForms = 4000 // word n-grams of a text looked up at most
)

// QueueAnyEntity queues into b the check of whether org has any live entity at all, so a
// caller that reads the graph on every turn (per-turn context) skips it, at the cost of one
// index probe in a round trip it makes anyway, for orgs that do not use the graph.
func QueueAnyEntity(b *pgx.Batch, org string, found *bool, err *error) {
	b.Queue(`SELECT EXISTS (SELECT 1 FROM graph_entities WHERE org_id = $1 AND merged_into IS NULL)`, org).
		QueryRow(func(row pgx.Row) error {
			*err = pg.Interpret(row.Scan(found))
			return nil
		})
}

// MentionQuery asks which entities a text mentions by name or alias.
type MentionQuery struct {
	Text  string
	Scope strata.Scope // entities visible from it (the composition rule of docs/semantic.md)
	Limit int          // [5, up to MaxLimit]
	Hide  []string     // restricted subjects (GDPR Art. 18): their entities are left out
}

// Mention is an entity a text mentions, and the form (its name or an alias, normalised)
// that the text contains.
type Mention struct {
	Entity Entity `json:"entity"`
	Form   string `json:"form"`
}

// Mentions returns the live entities visible from q.Scope whose name or an alias occurs in
// q.Text as whole words (case and spacing ignored; trailing punctuation and a possessive
// "'s" dropped), longest form first. Every word n-gram of the text (up to five words) is
// looked up in the entities' resolution keys at once, through their GIN index.
func (s *Store) Mentions(ctx context.Context, db pg.DBTX, org string, q MentionQuery) ([]Mention, error) {
	if err := checkString("text", q.Text, 1<<20, false); err != nil {
		return nil, err
	}
	forms := MentionForms(q.Text)
	if len(forms) == 0 {
		return nil, nil
	}
	all, u, a, ss := scopeArgs(&q.Scope)
	rows, err := db.Query(ctx, `SELECT `+entityCols+`, m.form FROM graph_entities e
		CROSS JOIN LATERAL (SELECT k AS form FROM unnest(e.keys) k WHERE k = ANY($2::text[])
			ORDER BY length(k) DESC, k LIMIT 1) m
		WHERE org_id = $1 AND merged_into IS NULL AND keys && $2::text[] AND `+visibleSQL("e", "$3", "$4", "$5", "$6")+`
		  AND NOT (user_id = ANY($8::text[]))
		ORDER BY length(m.form) DESC, (session_id <> '')::int + (agent_id <> '')::int + (user_id <> '')::int DESC, created_at, id
		LIMIT $7`, org, forms, all, u, a, ss, checkLimit(q.Limit, 5), hidden(q.Hide))
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Mention, error) {
		var m Mention
		var err error
		m.Entity, err = scanEntity(r, &m.Form)
		return m, err
	})
	return out, pg.Interpret(err)
}

// MentionForms is every run of one to five words of text, normalised as resolution keys
// are (Normalize), with and without trailing punctuation and a possessive "'s" on the last
// word: the candidates Mentions looks up.
func MentionForms(text string) []string {
	raw := strings.Fields(strings.ToLower(text))
	strip := func(w string) string {
		return strings.TrimFunc(w, func(r rune) bool {
			return unicode.IsPunct(r) && r != '.' && r != '\'' && r != '’' && r != '&' && r != '-' || unicode.IsSymbol(r)
		})
	}
	clean := func(w string) string {
		w = strings.TrimLeft(strings.TrimSuffix(strings.TrimSuffix(w, "'s"), "’s"), "'’")
		return strings.TrimRightFunc(w, func(r rune) bool { return unicode.IsPunct(r) })
	}
	words := make([]string, 0, len(raw))
	for _, w := range raw {
		if w = strip(w); w != "" {
			words = append(words, w)
		}
	}
	seen := map[string]bool{}
	var out []string
	add := func(f string) {
		if f != "" && !seen[f] && len(out) < maxMentionForms {
			seen[f] = true
			out = append(out, f)
		}
	}
	for i := range words {
		for n := 1; n <= maxMentionWords && i+n <= len(words); n++ {
			g := words[i : i+n]
			head := strings.Join(g[:n-1], " ")
			join := func(last string) string {
				if head == "" {
					return last
				}
				return head + " " + last
			}
			add(join(g[n-1]))
			add(join(clean(g[n-1])))
		}
	}
	return out
}

// InForceQuery asks for the relations in force of several entities at once.
type InForceQuery struct {
	IDs []uuid.UUID // live entities (a merged id has no relations of its own)
	// Scope, when set, keeps the relations written in a scope visible from it (the
	// composition rule): a relation written for another user stays out.
	Scope *strata.Scope
	Per   int      // relations per entity [12, up to MaxLimit]
	Hide  []string // restricted subjects, as AboutQuery.Hide
}

// InForce returns, for each of q.IDs, its relations in force now as subject or object (as
// About orders them: as subject first, then by predicate and valid_from), at most q.Per
// each, in one statement: the per-turn context reads every entity it shows this way.
func (s *Store) InForce(ctx context.Context, db pg.DBTX, org string, q InForceQuery) (map[uuid.UUID][]Relation, error) {
	out := make(map[uuid.UUID][]Relation, len(q.IDs))
	if len(q.IDs) == 0 {
		return out, nil
	}
	all, u, a, ss := scopeArgs(q.Scope)
	rows, err := db.Query(ctx, `SELECT x.eid, l.* FROM unnest($2::uuid[]) AS x(eid)
		CROSS JOIN LATERAL (SELECT `+relationCols+` FROM `+relationFrom+`
			WHERE r.org_id = $1 AND (r.subject_id = x.eid OR r.object_id = x.eid)
			  AND r.valid_to IS NULL AND r.superseded_at IS NULL
			  AND `+visibleSQL("r", "$3", "$4", "$5", "$6")+` AND `+shownRelationSQL("$8")+`
			  AND `+notQuarantinedSQL("r")+`
			ORDER BY r.subject_id <> x.eid, r.predicate, r.valid_from, r.id LIMIT $7) l`,
		org, q.IDs, all, u, a, ss, checkLimit(q.Per, 12), hidden(q.Hide))
	if err != nil {
		return nil, pg.Interpret(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var r Relation
		if err := rows.Scan(append([]any{&id}, relationDest(&r)...)...); err != nil {
			return nil, pg.Interpret(err)
		}
		relationUTC(&r)
		out[id] = append(out[id], r)
	}
	return out, pg.Interpret(rows.Err())
}
