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
