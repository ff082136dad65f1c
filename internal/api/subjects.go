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
