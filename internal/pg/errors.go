package pg

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-mem/strata/internal/strata"
)

// SQLSTATE codes we act on.
const (
	CodeUniqueViolation      = "23505"
	CodeSerializationFailure = "40001"
	CodeDeadlock             = "40P01"
	CodeLockNotAvailable     = "55P03"
	CodeQueryCanceled        = "57014"
	CodeUntranslatableChar   = "22P05"
	CodeCharNotInRepertoire  = "22021"
	CodeCheckViolation       = "23514"
	CodeInsufficientPriv     = "42501"
	CodeProgramLimit         = "54000" // program_limit_exceeded: e.g. an index row over the b-tree limit
)

// Interpret translates a pgx error into strata's sentinels at the store boundary:
// no rows → ErrNotFound; connection failures, timeouts and server shutdowns →
// UnavailableError (503); unique violations, serialization failures, deadlocks and lock
// timeouts → ErrConflict; anything else is returned as it is (a 500, logged, never shown).
func Interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return strata.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == CodeUniqueViolation:
			return &strata.ConflictError{Msg: "already exists"}
		case pgErr.Code == CodeProgramLimit:
			// A backstop: tiers bound what they index, so only an unforeseen value gets here.
			return strata.Invalid("body", "a value is too large to be stored")
		case pgErr.Code == CodeSerializationFailure, pgErr.Code == CodeDeadlock, pgErr.Code == CodeLockNotAvailable:
			return &strata.ConflictError{Msg: "concurrent update; retry"}
		case pgErr.Code == CodeQueryCanceled,
			len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code[:2] == "53" || pgErr.Code[:2] == "57"):
			return &strata.UnavailableError{Store: "postgres", Err: err}
		}
		return err
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || isClosedConn(err) {
		return &strata.UnavailableError{Store: "postgres", Err: err}
	}
	return err
}

func isClosedConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err)
}

// CommitUnknownError is a COMMIT whose outcome is unknown: the connection failed after the
// COMMIT was (or may have been) sent and before its answer arrived, so the transaction may
// have committed or not. It unwraps to the UnavailableError of the failure (a 503); the
// transport tells the caller that the write may have been applied.
type CommitUnknownError struct{ Err error }

func (e *CommitUnknownError) Error() string {
	return "the outcome of COMMIT is unknown (the connection failed before its answer): " + e.Err.Error()
}

func (e *CommitUnknownError) Unwrap() error { return e.Err }

// lostInFlight reports whether err, met while a pipeline that ends in COMMIT was being sent
// or read, may have left the COMMIT applied: a connection failure after bytes went out
// (not a server's error, not a failure pgx knows sent nothing).
func lostInFlight(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) || pgconn.SafeToRetry(err) {
		return false
	}
	var ue *strata.UnavailableError
	return errors.As(Interpret(err), &ue)
}
