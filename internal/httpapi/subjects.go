package httpapi

import (
	"context"
	"fmt"
	"slices"

	"github.com/strata-mem/strata/internal/api"
	"github.com/strata-mem/strata/internal/gdpr"
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
	// implements SubjectNamer) or its answer names (O implements SubjectNamer) is
	// restricted; checked together once the handler answered, before the answer leaves.
	SubjectData
	// JobSubjectData: refused when the job its input names (I implements JobNamer) belongs
	// to a restricted subject, checked before the handler runs; then as SubjectData for the
	// users its answer names, if it names any.
	JobSubjectData
	// FilteredSubjectData: a list whose items of restricted subjects are left out (O
	// implements ItemFilter); the cursor still pages past them. When its input names a job
	// (I implements JobNamer), that job's subject is refused first, as JobSubjectData.
	FilteredSubjectData
	// ScopedSubjectData: a search whose scope loses a restricted user before the handler runs
	// (I implements ScopeNamer): org-, agent- and session-level data still answer, the
	// subject's own never.
	ScopedSubjectData
	// CheckedByHandler: the handler checks in its own round trip (per-turn context checks
	// user, job and session in one statement beside everything else it reads). Rare; say
	// why where it is used.
	CheckedByHandler
	// ActsOnSubjectData: a write that acts on stored data (updates, deletes, step and job
	// transitions, forks, pops, restores): refused (403, strata.ErrRestricted) before the
	// handler runs — before anything is written to Postgres or Redis — when the data its
	// input names (I implements api.TargetNamer) belongs to a restricted subject, or a user
	// it names directly is restricted (Art. 18(2): stored, not otherwise processed). Data
	// that does not exist yet is not refused: a write that only adds new data is stored.
	ActsOnSubjectData
)

// subjectGuard enforces one operation's declaration.
type subjectGuard struct{ reads Reads }

func newSubjectGuard[I, O any](op string, reads Reads) subjectGuard {
	var in any = new(I)
	var out any = new(O)
	_, inSubjects := in.(api.SubjectNamer)
	_, inJob := in.(api.JobNamer)
	_, outSubjects := out.(api.SubjectNamer)
	_, filter := out.(api.ItemFilter)
	_, scope := in.(api.ScopeNamer)
	_, targets := in.(api.TargetNamer)
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
	case ActsOnSubjectData:
		ok = targets
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
	case ActsOnSubjectData:
		return "ActsOnSubjectData"
	}
	return "no declaration"
}

// before runs ahead of the handler: a job's subject, a search's scope, a write's targets.
func (g subjectGuard) before(ctx context.Context, s *Server, r *Request, in any) error {
	switch g.reads {
	case ActsOnSubjectData:
		t := in.(api.TargetNamer).SubjectTargets()
		gt := gdpr.Targets{Users: t.Users, Jobs: t.Jobs, Sessions: t.Sessions, Memories: t.Memories, Assets: t.Assets, Entities: t.Entities}
		for _, e := range t.KV {
			gt.KV = append(gt.KV, gdpr.KVEntry(e))
		}
		return s.Restrictions.RefuseTargets(ctx, r.sess, r.Org, gt)
	case JobSubjectData, FilteredSubjectData:
		if j, ok := in.(api.JobNamer); ok && j.SubjectJob() != "" {
			job := j.SubjectJob()
			return s.Restrictions.RefuseJob(ctx, r.Tx, r.Org, job)
		}
	case ScopedSubjectData:
		u := in.(api.ScopeNamer).ScopeUser()
		if *u == "" {
			return nil
		}
		restricted, err := s.Restrictions.Restricted(ctx, r.sess, r.Org, *u)
		if err != nil {
			return err
		}
		if restricted {
			*u = ""
			if d, ok := in.(api.ScopeDropper); ok {
				d.ScopeUserDropped()
			}
		}
	}
	return nil
}

// after runs once the handler answered: the subjects its input and answer name.
func (g subjectGuard) after(ctx context.Context, s *Server, r *Request, in, out any) error {
	switch g.reads {
	case SubjectData, JobSubjectData:
		// Usually only one of the two names subjects: its slice is used as it is (read only).
		var users []string
		if n, ok := in.(api.SubjectNamer); ok && g.reads == SubjectData {
			users = n.SubjectUsers()
		}
		if n, ok := out.(api.SubjectNamer); ok {
			if len(users) == 0 {
				users = n.SubjectUsers()
			} else {
				users = slices.Concat(users, n.SubjectUsers())
			}
		}
		if len(users) == 0 {
			return nil
		}
		return s.Restrictions.Refuse(ctx, r.sess, r.Org, users...)
	case FilteredSubjectData:
		f := out.(api.ItemFilter)
		users, jobs := f.ItemSubjects()
		ru, err := s.Restrictions.Among(ctx, r.sess, r.Org, users)
		if err != nil {
			return err
		}
		var named []string
		for _, j := range jobs {
			if j != "" {
				named = append(named, j)
			}
		}
		rj, err := s.Restrictions.JobsAmong(ctx, r.Tx, r.Org, named)
		if err != nil {
			return err
		}
		if len(ru) > 0 || len(rj) > 0 {
			f.DropItems(func(i int) bool {
				return (i < len(users) && ru[users[i]]) || (i < len(jobs) && rj[jobs[i]])
			})
		}
	}
	return nil
}
