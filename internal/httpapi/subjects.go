package httpapi

import (
	"context"
	"fmt"
)

// Reads declares what an operation serves of data subjects' data, so that the shared
// wrapper enforces GDPR Art. 18 restrictions for it: every operation names one (routes.go),
// and registration fails at start when the input and output types do not provide what the
// declaration needs — no endpoint can forget the check.
type Reads int

const (
	// NoSubjectData: the operation serves no data subject's data back (writes, compliance
	// and admin operations, ops).
	NoSubjectData Reads = iota + 1
	// SubjectData: refused (403, strata.ErrRestricted) when a user its input names (I
	// implements subjectNamer) or its answer names (O implements subjectNamer) is
	// restricted; checked together once the handler answered, before the answer leaves.
	SubjectData
	// JobSubjectData: refused when the job its input names (I implements jobNamer) belongs
	// to a restricted subject, checked before the handler runs; then as SubjectData for the
	// users its answer names, if it names any.
	JobSubjectData
	// FilteredSubjectData: a list whose items of restricted subjects are left out (O
	// implements itemFilter); the cursor still pages past them. When its input names a job
	// (I implements jobNamer), that job's subject is refused first, as JobSubjectData.
	FilteredSubjectData
	// ScopedSubjectData: a search whose scope loses a restricted user before the handler runs
	// (I implements scopeNamer): org-, agent- and session-level data still answer, the
	// subject's own never.
	ScopedSubjectData
	// CheckedByHandler: the handler checks in its own round trip (per-turn context checks
	// user, job and session in one statement beside everything else it reads). Rare; say
	// why where it is used.
	CheckedByHandler
)

// subjectNamer names the data subjects (user ids; "" for none) an input or an answer
// touches.
type subjectNamer interface{ subjectUsers() []string }

// jobNamer names the job an input reads ("" for none).
type jobNamer interface{ subjectJob() string }

// itemFilter is a list answer whose items belong to subjects: itemSubjects names each item's
// user and job ("" for none, both slices as long as the items), dropItems removes the items
// drop reports.
type itemFilter interface {
	itemSubjects() (users, jobs []string)
	dropItems(drop func(i int) bool)
}

// scopeNamer exposes the user of a search's scope so that the wrapper can clear it.
type scopeNamer interface{ scopeUser() *string }

// subjectGuard enforces one operation's declaration.
type subjectGuard struct{ reads Reads }

func newSubjectGuard[I, O any](op string, reads Reads) subjectGuard {
	var in any = new(I)
	var out any = new(O)
	_, inSubjects := in.(subjectNamer)
	_, inJob := in.(jobNamer)
	_, outSubjects := out.(subjectNamer)
	_, filter := out.(itemFilter)
	_, scope := in.(scopeNamer)
	ok := false
	switch reads {
	case NoSubjectData, CheckedByHandler:
		ok = true
	case SubjectData:
		ok = inSubjects || outSubjects
	case JobSubjectData:
		ok = inJob
	case FilteredSubjectData:
		ok = filter
	case ScopedSubjectData:
		ok = scope
	}
	if !ok {
		panic(fmt.Sprintf("httpapi: operation %s declares %s but neither its input nor its answer names a subject", op, reads))
	}
	return subjectGuard{reads: reads}
}

func (r Reads) String() string {
	switch r {
	case NoSubjectData:
		return "NoSubjectData"
	case SubjectData:
		return "SubjectData"
	case JobSubjectData:
		return "JobSubjectData"
	case FilteredSubjectData:
		return "FilteredSubjectData"
	case ScopedSubjectData:
		return "ScopedSubjectData"
	case CheckedByHandler:
		return "CheckedByHandler"
	}
	return "no declaration"
}

// before runs ahead of the handler: a job's subject, a search's scope.
func (g subjectGuard) before(ctx context.Context, s *Server, r *Request, in any) error {
	switch g.reads {
	case JobSubjectData, FilteredSubjectData:
		if j, ok := in.(jobNamer); ok && j.subjectJob() != "" {
			job := j.subjectJob()
			return s.restrictions.RefuseJob(ctx, r.Tx, r.Org, job)
		}
	case ScopedSubjectData:
		u := in.(scopeNamer).scopeUser()
		if *u == "" {
			return nil
		}
		restricted, err := s.restrictions.Restricted(ctx, r.sess, r.Org, *u)
		if err != nil {
			return err
		}
		if restricted {
			*u = ""
		}
	}
	return nil
}

// after runs once the handler answered: the subjects its input and answer name.
func (g subjectGuard) after(ctx context.Context, s *Server, r *Request, in, out any) error {
	switch g.reads {
	case SubjectData, JobSubjectData:
		var users []string
		if n, ok := in.(subjectNamer); ok && g.reads == SubjectData {
			users = append(users, n.subjectUsers()...)
		}
		if n, ok := out.(subjectNamer); ok {
			users = append(users, n.subjectUsers()...)
		}
		if len(users) == 0 {
			return nil
		}
		return s.restrictions.Refuse(ctx, r.sess, r.Org, users...)
	case FilteredSubjectData:
		f := out.(itemFilter)
		users, jobs := f.itemSubjects()
		ru, err := s.restrictions.Among(ctx, r.sess, r.Org, users)
		if err != nil {
			return err
		}
		var named []string
		for _, j := range jobs {
			if j != "" {
				named = append(named, j)
			}
		}
		rj, err := s.restrictions.JobsAmong(ctx, r.Tx, r.Org, named)
		if err != nil {
			return err
		}
		if len(ru) > 0 || len(rj) > 0 {
			f.dropItems(func(i int) bool {
				return (i < len(users) && ru[users[i]]) || (i < len(jobs) && rj[jobs[i]])
			})
		}
	}
	return nil
}

// Subject namers of the shared inputs.

func (q ScopeQuery) subjectUsers() []string { return []string{q.UserID} }
func (b ScopeBody) subjectUsers() []string  { return []string{b.UserID} }
func (p JobPath) subjectJob() string        { return p.Job }

// dropItems removes the items drop reports, keeping the cursor (it pages past them).
func (l *List[T]) dropItems(drop func(i int) bool) {
	kept := l.Items[:0]
	for i, it := range l.Items {
		if !drop(i) {
			kept = append(kept, it)
		}
	}
	l.Items = kept
}
