package semantic

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-mem/strata/internal/pg"
	"github.com/strata-mem/strata/internal/strata"
)

// Retract ends the validity of the current version id without a successor: the fact is no
// longer held (search and context stop serving it; an "as of" search before now still
// finds it), and every version stays in its history. It is how a retraction ("I no longer
// live in Berlin") is recorded instead of deleting the memory. A superseded version is a
// conflict naming its successor.
func (s *Store) Retract(ctx context.Context, tx pgx.Tx, org string, id uuid.UUID) (Memory, error) {
	old, err := s.Get(ctx, tx, org, id)
	if err != nil {
		return Memory{}, err
	}
	if err := lockScope(ctx, tx, old.Scope(org)); err != nil {
		return Memory{}, err
	}
	m, err := scanMemory(tx.QueryRow(ctx, `UPDATE memories SET valid_to = $3, updated_at = $3
		WHERE org_id = $1 AND id = $2 AND valid_to IS NULL RETURNING `+memCols, org, id, s.now().UTC()))
	if errors.Is(err, pgx.ErrNoRows) {
		if cur, gerr := s.Get(ctx, tx, org, id); gerr == nil && cur.SupersededBy != nil {
			return Memory{}, strata.Conflict("this memory version was superseded; retract the current version",
				map[string]any{"superseded_by": cur.SupersededBy.String()})
		}
		return Memory{}, strata.Conflict("this memory was already retracted", nil)
	}
	return m, pg.Interpret(err)
}
