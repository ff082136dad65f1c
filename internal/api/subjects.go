package api

// SubjectNamer names the data subjects (user ids; "" for none) an input or an answer
// touches.
type SubjectNamer interface{ SubjectUsers() []string }

// JobNamer names the job an input reads ("" for none).
type JobNamer interface{ SubjectJob() string }

// ItemFilter is a list answer whose items belong to subjects: ItemSubjects names each item's
// user and job ("" for none, both slices as long as the items), DropItems removes the items
// drop reports.
type ItemFilter interface {
	ItemSubjects() (users, jobs []string)
	DropItems(drop func(i int) bool)
}

// ScopeNamer exposes the user of a search's scope so that the wrapper can clear it.
type ScopeNamer interface{ ScopeUser() *string }

// ScopeDropper is a ScopeNamer told when its user was dropped (a search whose meaning
// changes without the user, e.g. a filter on it, answers nothing then).
type ScopeDropper interface{ ScopeUserDropped() }

// Subject namers of the shared inputs.

func (q ScopeQuery) SubjectUsers() []string { return []string{q.UserID} }

func (b ScopeBody) SubjectUsers() []string { return []string{b.UserID} }

func (p JobPath) SubjectJob() string { return p.Job }

// DropItems removes the items drop reports, keeping the cursor (it pages past them).
func (l *List[T]) DropItems(drop func(i int) bool) {
	kept := l.Items[:0]
	for i, it := range l.Items {
		if !drop(i) {
			kept = append(kept, it)
		}
	}
	l.Items = kept
}

// subjects is embedded in an answer whose data subjects are not all in its body (a session's
// user, a memory's for its retrievals, an asset's and each version's): the handler names
// them (SetSubjects), the wrapper checks them (SubjectUsers). An unexported field, so huma
// neither documents nor sends it.
type subjects []string

// SetSubjects names the answer's data subjects.
func (s *subjects) SetSubjects(users ...string) { *s = users }

// SubjectUsers implements SubjectNamer.
func (s subjects) SubjectUsers() []string { return s }

// TargetNamer names the stored data a write acts on (GDPR Art. 18(2)): the wrapper refuses
// the write before it runs when any of it belongs to a restricted subject. Data that does
// not exist yet is not refused: a write that only adds new data for a restricted subject
// is stored.
type TargetNamer interface{ SubjectTargets() Targets }

// Targets is what a write acts on, by kind ("" ids are ignored).
type Targets struct {
	Users    []string // data subjects named directly: the write is refused for them outright
	Jobs     []string
	Sessions []string
	Memories []string // memory version ids
	Assets   []string
	Entities []string // graph entity ids
	KV       []KVTarget
}

// KVTarget is one key-value entry at one scope.
type KVTarget struct{ Namespace, Key, Level, ScopeID string }

func kvTarget(p KVPath, sc ScopeBody) KVTarget {
	t := KVTarget{Namespace: p.Namespace, Key: p.Key, Level: "org"}
	switch {
	case sc.SessionID != "":
		t.Level, t.ScopeID = "session", sc.SessionID
	case sc.AgentID != "":
		t.Level, t.ScopeID = "agent", sc.AgentID
	case sc.UserID != "":
		t.Level, t.ScopeID = "user", sc.UserID
	}
	return t
}

// Targets of the writes that act on existing data.

func (p JobPath) SubjectTargets() Targets             { return Targets{Jobs: []string{p.Job}} }
func (in *AppendEventsInput) SubjectTargets() Targets { return Targets{Jobs: []string{in.Job}} }
func (in *RevertInput) SubjectTargets() Targets       { return Targets{Jobs: []string{in.Job}} }
func (p SessionPath) SubjectTargets() Targets         { return Targets{Sessions: []string{p.Session}} }
func (in MemoryIDInput) SubjectTargets() Targets      { return Targets{Memories: []string{in.ID}} }
func (in *PatchMemoryInput) SubjectTargets() Targets  { return Targets{Memories: []string{in.ID}} }
func (in *PutAssetInput) SubjectTargets() Targets     { return Targets{Assets: []string{in.Asset}} }
func (in *AddVersionInput) SubjectTargets() Targets   { return Targets{Assets: []string{in.Asset}} }
func (in GraphEntityIDInput) SubjectTargets() Targets { return Targets{Entities: []string{in.ID}} }
func (in *GraphResolveInput) SubjectTargets() Targets {
	return Targets{Users: []string{in.Body.UserID}}
}
func (in *GraphMergeInput) SubjectTargets() Targets {
	return Targets{Entities: []string{in.ID, in.Body.Into}}
}
func (in *KvPutInput) SubjectTargets() Targets {
	return Targets{KV: []KVTarget{kvTarget(in.KVPath, in.Body.ScopeBody)}}
}
func (in *KvRestoreInput) SubjectTargets() Targets { return in.kvUser(in.Body.ScopeBody) }
func (in *KvDeleteInput) SubjectTargets() Targets  { return in.kvUser(ScopeBody(in.ScopeQuery)) }
func (in *GraphRelationInput) SubjectTargets() Targets {
	b := in.Body
	return Targets{Users: []string{b.UserID}, Entities: []string{b.SubjectID, b.ObjectID}}
}

// ExtractInput: a session's stored turns, or messages for a user whose stored memories the
// model compares them with.
func (in *ExtractInput) SubjectTargets() Targets {
	return Targets{Sessions: []string{in.Body.SessionID}, Users: []string{in.Body.UserID}}
}

// kvUser: deleting or restoring an entry acts on the subject's stored versions, whether or
// not a live entry exists at the scope (restore brings back a deleted one).
func (p KVPath) kvUser(sc ScopeBody) Targets {
	return Targets{Users: []string{sc.UserID}, KV: []KVTarget{kvTarget(p, sc)}}
}
