package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// relationCols reads a relation of alias r with its subject's (s) and object's (o, left
// joined) names.
const relationCols = `r.id, r.user_id, r.agent_id, r.session_id, r.subject_id, s.name, r.predicate, r.object_id,
	coalesce(o.name, ''), r.object_value, r.functional, r.fact, r.source_memory_id, r.source_job_id, r.source_event_seq,
	r.created_by_key, r.source_agent_id, r.valid_from, r.valid_to, r.recorded_at, r.superseded_at, r.superseded_by`

// relationFrom joins what relationCols reads.
const relationFrom = `graph_relations r
	JOIN graph_entities s ON s.org_id = r.org_id AND s.id = r.subject_id
	LEFT JOIN graph_entities o ON o.org_id = r.org_id AND o.id = r.object_id`

func relationDest(r *Relation) []any {
	p := &r.Provenance
	return []any{&r.ID, &r.UserID, &r.AgentID, &r.SessionID, &r.SubjectID, &r.SubjectName, &r.Predicate,
		&r.ObjectID, &r.ObjectName, &r.ObjectValue, &r.Functional, &r.Fact, &p.MemoryID, &p.JobID, &p.EventSeq,
		&p.KeyID, &p.AgentID, &r.ValidFrom, &r.ValidTo, &r.RecordedAt, &r.SupersededAt, &r.SupersededBy}
}

// relationUTC puts a scanned relation's times in UTC.
func relationUTC(r *Relation) {
	r.ValidFrom, r.RecordedAt = r.ValidFrom.UTC(), r.RecordedAt.UTC()
	r.ValidTo, r.SupersededAt = utcp(r.ValidTo), utcp(r.SupersededAt)
}

func scanRelation(row pgx.Row) (Relation, error) {
	var r Relation
	if err := row.Scan(relationDest(&r)...); err != nil {
		return r, err
	}
	relationUTC(&r)
	return r, nil
}

func collectRelations(rows pgx.Rows, err error) ([]Relation, error) {
	if err != nil {
		return nil, pg.Interpret(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Relation, error) { return scanRelation(r) })
	if out == nil {
		out = []Relation{}
	}
	return out, pg.Interpret(err)
}

// NormalizePredicate is the stored form of a predicate: lower case, words joined by "_"
// ("Works at" and "WORKS_AT" are one predicate).
func NormalizePredicate(p string) string {
	return strings.Join(strings.Fields(strings.ToLower(p)), "_")
}

// RelationInput is a relation to add.
type RelationInput struct {
	// Scope is the writer's scope: the relation is stored in it, and subject and object
	// must be visible from it.
	Scope     strata.Scope
	SubjectID uuid.UUID
	Predicate string
	// Exactly one of ObjectID (another entity) and ObjectValue (a literal) is set.
	ObjectID    *uuid.UUID
	ObjectValue *string
	// Functional: the subject has one object for this predicate at a time (works_at,
	// lives_in), so this relation contradicts one in force with another object.
	Functional bool
	// Fact is the relation as a sentence ("Ana manages the Lisbon store").
	Fact       string
	Provenance Provenance
	// ValidFrom is when it became true in the world [now]; ValidTo, when it stopped (nil:
	// it still holds).
	ValidFrom *time.Time
	ValidTo   *time.Time
}

func (in *RelationInput) validate() error {
	if err := checkScope(in.Scope); err != nil {
		return err
	}
	if in.SubjectID == uuid.Nil {
		return strata.Invalid("subject_id", "is required")
	}
	if err := checkString("predicate", in.Predicate, MaxPredicate, true); err != nil {
		return err
	}
	switch {
	case (in.ObjectID == nil) == (in.ObjectValue == nil):
		return strata.Invalid("object_id", "exactly one of object_id and object_value is required")
	case in.ObjectID != nil && *in.ObjectID == uuid.Nil:
		return strata.Invalid("object_id", "must not be the nil uuid")
	case in.ObjectID != nil && *in.ObjectID == in.SubjectID:
		return strata.Invalid("object_id", "must differ from the subject")
	case in.ObjectValue != nil:
		if err := checkString("object_value", *in.ObjectValue, MaxNameLen, true); err != nil {
			return err
		}
	}
	if err := checkString("fact", in.Fact, MaxFactLen, false); err != nil {
		return err
	}
	if err := strata.CheckID("provenance.job_id", in.Provenance.JobID, true); err != nil {
		return err
	}
	if err := checkString("provenance.key_id", in.Provenance.KeyID, MaxNameLen, false); err != nil {
		return err
	}
	if err := strata.CheckID("provenance.agent_id", in.Provenance.AgentID, true); err != nil {
		return err
	}
	if in.ValidFrom != nil && in.ValidTo != nil && in.ValidTo.Before(*in.ValidFrom) {
		return strata.Invalid("valid_to", "must not be before valid_from")
	}
	return nil
}

// AddResult says what AddRelation did.
type AddResult struct {
	Relation Relation `json:"relation"`
	// Created is false when the same relation was already in force (Relation is that one).
	Created bool `json:"created"`
	// Closed are the relations the new one contradicted and closed.
	Closed []uuid.UUID `json:"closed,omitempty"`
}

// endpoint reads a relation endpoint for the writer: the live entity (a merged id leads to
// its survivor), which must be visible from sc.
func (s *Store) endpoint(ctx context.Context, db pg.DBTX, sc strata.Scope, field string, id uuid.UUID) (Entity, error) {
	for hop := 0; ; hop++ {
		e, err := scanEntity(db.QueryRow(ctx, `SELECT `+entityCols+` FROM graph_entities WHERE org_id = $1 AND id = $2`, sc.OrgID, id))
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !visibleFrom(e, sc)) {
			return Entity{}, strata.NoSuch(field, "no such entity in this scope")
		}
		if err != nil {
			return Entity{}, pg.Interpret(err)
		}
		if e.MergedInto == nil {
			return e, nil
		}
		if hop > 0 { // tombstones point at a live entity: Merge re-points older ones
			return Entity{}, fmt.Errorf("entity %s: merged into %s, itself merged", id, *e.MergedInto)
		}
		id = *e.MergedInto
	}
}

// lockEndpoints locks the subject (FOR NO KEY UPDATE: one writer of its relations at a
// time) and the object (FOR SHARE: no merge or split of it until the relation commits), in
// id order like Merge, so writers and merges never wait on each other in a cycle. It
// reports whether both are still live: a merge that committed meanwhile moved them.
func lockEndpoints(ctx context.Context, db pg.DBTX, org string, subject uuid.UUID, object *uuid.UUID) (bool, error) {
	type lock struct {
		id   uuid.UUID
		mode string
	}
	locks := []lock{{subject, "NO KEY UPDATE"}}
	if object != nil {
		locks = append(locks, lock{*object, "SHARE"})
		if bytes.Compare(object[:], subject[:]) < 0 {
			locks[0], locks[1] = locks[1], locks[0]
		}
	}
	for _, l := range locks {
		var merged *uuid.UUID
		err := db.QueryRow(ctx, `SELECT merged_into FROM graph_entities WHERE org_id = $1 AND id = $2 FOR `+l.mode, org, l.id).Scan(&merged)
		if err != nil {
			return false, pg.Interpret(err)
		}
		if merged != nil {
			return false, nil
		}
	}
	return true, nil
}

// AddRelation adds a relation in the caller's transaction. A relation already in force
// with the same subject, predicate and object is answered as it is (Created false). A
// relation is functional when its input says so or a relation in force for the same
// subject and predicate is. A functional relation closes the relations in force for the same subject and predicate
// with another object: their valid_to becomes the new one's valid_from and superseded_at
// the time of the write, and they stay (History, as-of reads). If such a relation began
// after the new one's valid_from, the new one arrived late: it is recorded as history,
// valid until that relation began, and the other stays in force. Writes of one subject's
// relations serialise on the subject's row; the object is share-locked, so a merge of
// either waits for the relation (or the relation for the merge, and then follows it).
func (s *Store) AddRelation(ctx context.Context, db pg.DBTX, in RelationInput) (AddResult, error) {
	var res AddResult
	if err := in.validate(); err != nil {
		return res, err
	}
	sc := in.Scope
	pred := NormalizePredicate(in.Predicate)
	var subj, obj Entity
	for attempt := 0; ; attempt++ {
		var err error
		if subj, err = s.endpoint(ctx, db, sc, "subject_id", in.SubjectID); err != nil {
			return res, err
		}
		var objID *uuid.UUID
		if in.ObjectID != nil {
			if obj, err = s.endpoint(ctx, db, sc, "object_id", *in.ObjectID); err != nil {
				return res, err
			}
			if obj.ID == subj.ID {
				return res, strata.Invalid("object_id", "must differ from the subject (they were merged)")
			}
			objID = &obj.ID
		}
		live, err := lockEndpoints(ctx, db, sc.OrgID, subj.ID, objID)
		if err != nil {
			return res, fmt.Errorf("locking the relation's entities: %w", err)
		}
		if live {
			break
		}
		if attempt == 2 {
			return res, strata.Conflict("the relation's entities are being merged; retry", nil)
		}
	}
	now := s.now().UTC()
	validFrom := now
	if in.ValidFrom != nil {
		validFrom = in.ValidFrom.UTC()
	}
	validTo := utcp(in.ValidTo)

	// Relations in force for (subject, predicate).
	rows, err := db.Query(ctx, `SELECT `+relationCols+` FROM `+relationFrom+`
		WHERE r.org_id = $1 AND r.subject_id = $2 AND r.predicate = $3 AND r.valid_to IS NULL AND r.superseded_at IS NULL
		ORDER BY r.valid_from, r.id FOR UPDATE OF r`, sc.OrgID, subj.ID, pred)
	open, err := collectRelations(rows, err)
	if err != nil {
		return res, fmt.Errorf("reading relations of %s: %w", subj.ID, err)
	}
	sameObject := func(r Relation) bool {
		if in.ObjectID != nil {
			return r.ObjectID != nil && *r.ObjectID == obj.ID
		}
		return r.ObjectValue != nil && *r.ObjectValue == *in.ObjectValue
	}
	// Functional is a property of the predicate: one relation in force that says so makes
	// the new one functional too, whatever its writer said.
	functional := in.Functional
	for _, r := range open {
		functional = functional || r.Functional
	}
	var toClose []uuid.UUID
	for _, r := range open {
		switch {
		case sameObject(r) && validTo == nil:
			res.Relation = r
			return res, nil
		case !functional || validTo != nil || sameObject(r):
			// not a contradiction: another object of a many-valued predicate, or history
		case !validFrom.Before(r.ValidFrom):
			toClose = append(toClose, r.ID)
		default: // the new relation is older than the one in force: it ended where that began
			if validTo == nil || validTo.After(r.ValidFrom) {
				t := r.ValidFrom
				validTo = &t
			}
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return res, err
	}
	if len(toClose) > 0 {
		tag, err := db.Exec(ctx, `UPDATE graph_relations SET valid_to = greatest($3, valid_from), superseded_at = $4, superseded_by = $5
			WHERE org_id = $1 AND id = ANY($2)`, sc.OrgID, toClose, validFrom, now, id)
		if err != nil {
			return res, fmt.Errorf("closing relations of %s: %w", subj.ID, pg.Interpret(err))
		}
		if tag.RowsAffected() != int64(len(toClose)) {
			return res, fmt.Errorf("closing relations of %s: %d of %d closed", subj.ID, tag.RowsAffected(), len(toClose))
		}
		res.Closed = toClose
	}
	var objID *uuid.UUID
	if in.ObjectID != nil {
		objID = &obj.ID
	}
	p := in.Provenance
	if _, err := db.Exec(ctx, `INSERT INTO graph_relations (org_id, id, user_id, agent_id, session_id, subject_id, predicate,
			object_id, object_value, functional, fact, source_memory_id, source_job_id, source_event_seq, created_by_key,
			source_agent_id, valid_from, valid_to, recorded_at, writers)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`,
		sc.OrgID, id, sc.UserID, sc.AgentID, sc.SessionID, subj.ID, pred, objID, in.ObjectValue, functional, in.Fact,
		p.MemoryID, p.JobID, p.EventSeq, p.KeyID, p.AgentID, validFrom, validTo, now, p.Writers); err != nil {
		return res, fmt.Errorf("adding a relation of %s: %w", subj.ID, pg.Interpret(err))
	}
	res.Relation, err = s.relation(ctx, db, sc.OrgID, id)
	res.Created = err == nil
	return res, err
}

// relation reads one relation by id.
func (s *Store) relation(ctx context.Context, db pg.DBTX, org string, id uuid.UUID) (Relation, error) {
	r, err := scanRelation(db.QueryRow(ctx, `SELECT `+relationCols+` FROM `+relationFrom+` WHERE r.org_id = $1 AND r.id = $2`, org, id))
	return r, pg.Interpret(err)
}

// Relation returns one relation (any version) of org by id.
func (s *Store) Relation(ctx context.Context, db pg.DBTX, org string, id uuid.UUID) (Relation, error) {
	return s.relation(ctx, db, org, id)
}

// EndRelation records that a relation in force stopped holding in the world at validTo
// (nil: now), without a successor: it stays in History and in as-of reads before validTo.
func (s *Store) EndRelation(ctx context.Context, db pg.DBTX, org string, id uuid.UUID, validTo *time.Time) (Relation, error) {
	now := s.now().UTC()
	end := now
	if validTo != nil {
		end = validTo.UTC()
	}
	tag, err := db.Exec(ctx, `UPDATE graph_relations SET valid_to = greatest($3, valid_from), superseded_at = greatest($4, recorded_at)
		WHERE org_id = $1 AND id = $2 AND valid_to IS NULL AND superseded_at IS NULL`, org, id, end, now)
	if err != nil {
		return Relation{}, pg.Interpret(err)
	}
	r, err := s.relation(ctx, db, org, id)
	if err != nil {
		return r, err
	}
	if tag.RowsAffected() == 0 {
		return r, strata.Conflict("the relation is not in force", map[string]any{"relation_id": id.String()})
	}
	return r, nil
}

// asOfSQL is the bi-temporal visibility of relation alias r: it held in the world at $w
// (valid_from ≤ w < valid_to) according to what Strata knew at $k (timestamptz; infinity:
// everything it knows now). A row recorded after k is unknown at k; a closing learned after
// k (superseded_at > k) is ignored at k; a row superseded without an end in the world
// (a duplicate folded by a merge) is no longer believed from superseded_at on.
func asOfSQL(r, w, k string) string {
	return fmt.Sprintf(`(%[1]s.recorded_at <= %[3]s AND %[1]s.valid_from <= %[2]s
		AND (%[1]s.superseded_at IS NULL OR %[1]s.superseded_at > %[3]s OR %[1]s.valid_to IS NOT NULL)
		AND (CASE WHEN %[1]s.superseded_at > %[3]s THEN NULL ELSE %[1]s.valid_to END IS NULL
		     OR %[2]s < CASE WHEN %[1]s.superseded_at > %[3]s THEN NULL ELSE %[1]s.valid_to END))`, r, w, k)
}

// asOfArgs returns the world and record times of an AsOf (record: infinity when unset).
func (s *Store) asOfArgs(a AsOf) (time.Time, any) {
	w := s.now().UTC()
	if a.World != nil {
		w = a.World.UTC()
	}
	var k any = "infinity"
	if a.Record != nil {
		k = a.Record.UTC()
	}
	return w, k
}

// About is an entity with its relations as of a time.
type About struct {
	Entity    Entity     `json:"entity"`
	Relations []Relation `json:"relations"` // where it is the subject or the object
}

// AboutQuery asks for an entity and its relations.
type AboutQuery struct {
	ID    uuid.UUID // a merged id reads its survivor
	At    AsOf      // the zero AsOf: in force now
	Limit int       // [100, up to MaxLimit]
	// Hide are data subjects whose processing is restricted (GDPR Art. 18): the entity, if
	// it is theirs, answers strata.ErrRestricted; their relations, and relations with their
	// entities, are left out.
	Hide []string
}

// About returns an entity of org (the survivor, when q.ID was merged) with its relations
// that held at q.At, as subject or object, by predicate and valid_from.
func (s *Store) About(ctx context.Context, db pg.DBTX, org string, q AboutQuery) (About, error) {
	e, err := s.visibleStart(ctx, db, org, q.ID, q.Hide)
	if err != nil {
		return About{}, err
	}
	w, k := s.asOfArgs(q.At)
	rows, err := db.Query(ctx, `SELECT `+relationCols+` FROM `+relationFrom+`
		WHERE r.org_id = $1 AND (r.subject_id = $2 OR r.object_id = $2) AND `+asOfSQL("r", "$3::timestamptz", "$4::timestamptz")+`
		  AND `+shownRelationSQL("$6")+` AND `+notQuarantinedSQL("r")+`
		ORDER BY r.subject_id <> $2, r.predicate, r.valid_from, r.id LIMIT $5`, org, e.ID, w, k, checkLimit(q.Limit, 100), hidden(q.Hide))
	rels, err := collectRelations(rows, err)
	if err != nil {
		return About{}, fmt.Errorf("reading relations of %s: %w", e.ID, err)
	}
	return About{Entity: e, Relations: rels}, nil
}

// visibleStart reads the live entity a read starts from; a hidden subject's is restricted.
func (s *Store) visibleStart(ctx context.Context, db pg.DBTX, org string, id uuid.UUID, hide []string) (Entity, error) {
	e, err := s.live(ctx, db, org, id)
	if err == nil && e.UserID != "" && slices.Contains(hide, e.UserID) {
		return Entity{}, strata.ErrRestricted
	}
	return e, err
}

// hidden is a Hide list as a query argument (never nil: ANY of NULL is NULL).
func hidden(hide []string) []string {
	if hide == nil {
		return []string{}
	}
	return hide
}

// shownRelationSQL leaves out relations of the hidden subjects at param (text[]): written
// in their scope, or with one of their entities as subject or object (relationFrom's s, o).
func shownRelationSQL(param string) string {
	return fmt.Sprintf(`NOT (r.user_id = ANY(%[1]s::text[]) OR s.user_id = ANY(%[1]s::text[])
		OR coalesce(o.user_id = ANY(%[1]s::text[]), false))`, param)
}

// notQuarantinedSQL leaves out relations of alias r written by a key or an agent under an
// active quarantine (issue 43 item 5): the graph reads apply it as semantic search applies
// "NOT quarantined" to memory versions. memory_quarantines belongs to the semantic tier
// (migrations/0011_quarantine.sql, internal/semantic/quarantine.go); this reads it with the
// same writer rule as its trigger: the key that wrote the row, or its provenance agent (its
// scope agent when it named none), at or after the quarantine's since, which for a relation
// is when Strata recorded it (recorded_at; valid_from is world time and may be backdated).
// An extracted relation also matches a quarantine of any writer of its batch (writers,
// migration 0047), however late the quarantine is made.
// A released quarantine no longer hides anything; there is no admin review of quarantined
// relations (they are always left out).
func notQuarantinedSQL(r string) string {
	return fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM memory_quarantines qq
		WHERE qq.org_id = %[1]s.org_id AND qq.status = 'active' AND %[1]s.recorded_at >= qq.since
		  AND ((qq.key_id <> '' AND (qq.key_id = %[1]s.created_by_key OR qq.key_id = ANY(%[1]s.writers)))
		    OR (qq.agent_id <> '' AND qq.agent_id = coalesce(nullif(%[1]s.source_agent_id, ''), %[1]s.agent_id))))`, r)
}

// HistoryQuery selects relation versions.
type HistoryQuery struct {
	EntityID  uuid.UUID
	Predicate string // optional
	Limit     int    // [100, up to MaxLimit]
	// After pages: versions recorded after this relation id (UUIDv7: in recording order).
	After *uuid.UUID
	Hide  []string // restricted subjects, as AboutQuery.Hide
}

// History returns every version of the relations of an entity of org (as subject or
// object; a merged id reads its survivor's), current and closed, in the order Strata
// recorded them.
func (s *Store) History(ctx context.Context, db pg.DBTX, org string, q HistoryQuery) ([]Relation, error) {
	e, err := s.visibleStart(ctx, db, org, q.EntityID, q.Hide)
	if err != nil {
		return nil, err
	}
	pred := ""
	if q.Predicate != "" {
		pred = NormalizePredicate(q.Predicate)
	}
	rows, err := db.Query(ctx, `SELECT `+relationCols+` FROM `+relationFrom+`
		WHERE r.org_id = $1 AND (r.subject_id = $2 OR r.object_id = $2) AND ($3 = '' OR r.predicate = $3)
		  AND ($4::uuid IS NULL OR r.id > $4) AND `+shownRelationSQL("$6")+`
		  AND `+notQuarantinedSQL("r")+`
		ORDER BY r.id LIMIT $5`, org, e.ID, pred, q.After, checkLimit(q.Limit, 100), hidden(q.Hide))
	return collectRelations(rows, err)
}
