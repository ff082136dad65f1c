package pg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// ErrNoTripCommit is CommitInTrip's refusal: the session cannot end in the batch's round
// trip (see CanCommitInTrip).
var ErrNoTripCommit = errors.New("pg: this session cannot commit in its write's round trip")

// CanCommitInTrip reports whether CommitInTrip may end the session: nothing queued to run
// at BEGIN (an Idempotency-Key claim) or at COMMIT (an audit or idempotency record, an
// event), not finished, not reading from a replica or one statement at a time.
func (s *Session) CanCommitInTrip() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.canCommitInTrip()
}

func (s *Session) canCommitInTrip() bool {
	return !s.done && s.replica == nil && !s.oneTrip && len(s.lead) == 0 && len(s.trailer) == 0 &&
		(s.tx == nil || s.tx.failed == nil)
}

// CommittedInTrip reports whether CommitInTrip committed the session: the write and
// everything its unit of work records about it (its audit row) went in that round trip, and
// there is nothing left to commit.
func (s *Session) CommittedInTrip() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inTrip
}

// CommitInTrip sends b's statements and COMMIT in one round trip — with BEGIN and the org
// setting in front when no statement ran yet, so a one-statement write costs one round trip
// in all — runs b's callbacks on their results, and then the AfterCommit hooks. The
// session is finished either way: when a statement fails nothing commits and its error is
// returned; when the connection fails after the batch went out, the error is a
// CommitUnknownError (it may have committed). A caller that uses it records in b whatever the unit of work would have queued
// for COMMIT (its audit row), and must not fail after it returned nil: the write is
// committed. It returns ErrNoTripCommit, having sent nothing, when CanCommitInTrip is false.
func (s *Session) CommitInTrip(ctx context.Context, b *pgx.Batch) error {
	s.mu.Lock()
	if !s.canCommitInTrip() {
		s.mu.Unlock()
		return ErrNoTripCommit
	}
	if s.tx == nil {
		tx, err := s.newTx(s.pool)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.tx = tx
	}
	tx, hooks := s.tx, s.hooks
	s.done, s.hooks = true, nil
	s.mu.Unlock()
	if err := tx.commitBatch(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	s.inTrip = true
	s.mu.Unlock()
	for _, h := range hooks {
		h()
	}
	return nil
}

// commitBatch is commit with b's statements (and their callbacks) in place of a trailer.
func (t *orgTx) commitBatch(ctx context.Context, b *pgx.Batch) error {
	var nb *pgx.Batch
	begin := t.tx == nil
	if begin {
		nb = t.beginBatch()
	} else {
		nb = &pgx.Batch{}
	}
	qs := b.QueuedQueries
	nb.QueuedQueries = append(nb.QueuedQueries, qs...)
	nb.Queue("COMMIT")
	return t.sendCommit(ctx, nb, begin, func(br pgx.BatchResults) error {
		for _, q := range qs {
			var err error
			if q.Fn != nil {
				err = q.Fn(br)
			} else {
				_, err = br.Exec()
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}
