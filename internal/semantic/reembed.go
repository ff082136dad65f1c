package semantic

import (
	"context"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/strata-mem/strata/internal/pg"
)

// Changing the embedding model (docs/semantic.md, "Changing the model"):
//
//  1. Reembed(new space) fills embedding_next for every memory, org by org, in batches,
//     while servers keep writing and searching `embedding` with the old model. It is
//     resumable: rows already done are skipped.
//  2. EnsureIndex(conn, "embedding_next", dims, true) builds the new HNSW index
//     concurrently (no write lock).
//  3. SwitchSpace(new space) takes a short write lock, re-embeds the rows written since
//     step 1, and swaps the columns by renaming them (atomic: one transaction). Old and
//     new indexes follow their columns.
//  4. Restart the servers with the new STRATA_EMBEDDER/MODEL/DIMS. A server still on the
//     old model finds no vectors of its space (its vector leg is empty; full text still
//     answers) and writes old-space rows, which Repair re-embeds in place afterwards.
//  5. ClearNext drops the old vectors in batches.
//
// These run as the table owner (cmd or a worker job with the migration URL): they create
// indexes and rename columns. Row-level security is forced even for the owner, so every
// statement runs inside an org's transaction; orgs are listed from api_keys plus extra.

// Vectorize embeds texts (the service's embedder).
type Vectorize func(ctx context.Context, texts []string) ([][]float32, error)

// EnsureIndex creates the partial HNSW index for dims on column ("embedding" or
// "embedding_next") unless it exists. concurrently avoids blocking writes (not inside a
// transaction). Set maintenance_work_mem high on conn first (1GB builds 100k×384 in ~35 s).
func EnsureIndex(ctx context.Context, conn *pgx.Conn, column string, dims int, concurrently bool) error {
	name, dimsCol := "memories_hnsw_"+strconv.Itoa(dims), "dims"
	switch column {
	case "embedding":
	case "embedding_next":
		name, dimsCol = "memories_hnsw_next_"+strconv.Itoa(dims), "next_dims"
	default:
		return fmt.Errorf("semantic: EnsureIndex: no vector column %q", column)
	}
	if dims <= 0 || dims > 16000 {
		return fmt.Errorf("semantic: EnsureIndex: bad dims %d", dims)
	}
	using := ` USING hnsw ((` + column + `::vector(` + strconv.Itoa(dims) + `)) vector_cosine_ops) WHERE ` + dimsCol + ` = ` + strconv.Itoa(dims)
	var partitioned bool
	if err := conn.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = 'memories'::regclass`).Scan(&partitioned); err != nil {
		return err
	}
	if !concurrently || !partitioned {
		conc := ""
		if concurrently {
			conc = "CONCURRENTLY "
		}
		_, err := conn.Exec(ctx, `CREATE INDEX `+conc+`IF NOT EXISTS `+name+` ON memories`+using)
		return err
	}
	return ensurePartitionedIndex(ctx, conn, name, using)
}

// ensurePartitionedIndex builds an index on a partitioned memories without blocking
// writes: Postgres refuses CREATE INDEX CONCURRENTLY on a partitioned table, so the
// parent gets an (invalid) index of its own (ON ONLY), each partition builds its index
// concurrently, and attaching the last one makes the parent's valid. Rerunning after an
// interruption finishes the job: a partition's half-built (invalid) index is rebuilt.
func ensurePartitionedIndex(ctx context.Context, conn *pgx.Conn, name, using string) error {
	if _, err := conn.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+name+` ON ONLY memories`+using); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT c.relname,
			(SELECT ci.relname FROM pg_index i JOIN pg_class ci ON ci.oid = i.indexrelid
			 JOIN pg_inherits ih ON ih.inhrelid = i.indexrelid AND ih.inhparent = $1::regclass
			 WHERE i.indrelid = c.oid) AS attached
		FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
		WHERE h.inhparent = 'memories'::regclass ORDER BY c.relname`, name)
	if err != nil {
		return err
	}
	type part struct {
		table    string
		attached *string
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (part, error) {
		var p part
		return p, r.Scan(&p.table, &p.attached)
	})
	if err != nil {
		return err
	}
	for _, p := range parts {
		if p.attached != nil {
			continue
		}
		// The child's name: the first free one, or one an interrupted run left unattached
		// (a renamed parent, as SwitchSpace does, keeps its children's old names).
		var child string
		var valid *bool
		for i := 0; ; i++ {
			base := p.table + "_" + name
			if len(base) > 58 {
				base = base[:58]
			}
			child = base
			if i > 0 {
				child = base + "_" + strconv.Itoa(i)
			}
			var exists, attachedElsewhere bool
			valid = nil
			err := conn.QueryRow(ctx, `SELECT true, i.indisvalid, EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = i.indexrelid)
				FROM pg_index i WHERE i.indexrelid = to_regclass($1)`, child).Scan(&exists, &valid, &attachedElsewhere)
			if err != nil && err != pgx.ErrNoRows {
				return err
			}
			if !exists || !attachedElsewhere {
				break
			}
		}
		ident := pgx.Identifier{child}.Sanitize()
		if valid != nil && !*valid { // an interrupted concurrent build
			if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+ident); err != nil {
				return err
			}
		}
		if _, err := conn.Exec(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+ident+` ON `+pgx.Identifier{p.table}.Sanitize()+using); err != nil {
			return fmt.Errorf("building %s on %s: %w", name, p.table, err)
		}
		if _, err := conn.Exec(ctx, `ALTER INDEX `+name+` ATTACH PARTITION `+ident); err != nil {
			return fmt.Errorf("attaching %s to %s: %w", child, name, err)
		}
	}
	return nil
}

func orgs(ctx context.Context, conn *pgx.Conn, extra []string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT DISTINCT org_id FROM api_keys UNION SELECT unnest($1::text[]) ORDER BY 1`, extra)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func inOrg(ctx context.Context, conn *pgx.Conn, org string, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := pg.SetOrg(ctx, tx, org); err != nil {
			return err
		}
		return fn(tx)
	})
}

// embedBatch re-embeds up to batch rows matching where (an SQL condition on memories) and
// writes them with set (an SQL SET list using $3 vector, $4 embedder, $5 model, $6 dims).
func embedBatch(ctx context.Context, tx pgx.Tx, org, where, set string, sp Space, embed Vectorize, batch int) (int, error) {
	rows, err := tx.Query(ctx, `SELECT id, text FROM memories WHERE org_id = $1 AND `+where+
		` ORDER BY id LIMIT $5 FOR UPDATE`, org, sp.Embedder, sp.Model, sp.Dims, batch)
	if err != nil {
		return 0, err
	}
	type row struct {
		id   uuid.UUID
		text string
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.text)
	})
	if err != nil || len(rs) == 0 {
		return 0, err
	}
	texts := make([]string, len(rs))
	for i, r := range rs {
		texts[i] = r.text
	}
	vecs, err := embed(ctx, texts)
	if err != nil {
		return 0, err
	}
	b := &pgx.Batch{}
	for i, r := range rs {
		if err := checkVector(vecs[i], sp); err != nil {
			return 0, err
		}
		b.Queue(`UPDATE memories SET `+set+` WHERE org_id = $1 AND id = $2`,
			org, r.id, pgvector.NewVector(vecs[i]), sp.Embedder, sp.Model, sp.Dims)
	}
	return len(rs), tx.SendBatch(ctx, b).Close()
}

const (
	notNext    = `(next_embedder IS DISTINCT FROM $2 OR next_model IS DISTINCT FROM $3 OR next_dims IS DISTINCT FROM $4) AND NOT (embedder = $2 AND model = $3 AND dims = $4)`
	setNext    = `embedding_next = $3, next_embedder = $4, next_model = $5, next_dims = $6`
	notCurrent = `NOT (embedder = $2 AND model = $3 AND dims = $4)`
	setCurrent = `embedding = $3, embedder = $4, model = $5, dims = $6, embedding_next = NULL, next_embedder = NULL, next_model = NULL, next_dims = NULL`
)

func eachBatch(ctx context.Context, conn *pgx.Conn, extraOrgs []string, where, set string, sp Space, embed Vectorize, batch int) (int, error) {
	if batch <= 0 {
		batch = 256
	}
	os, err := orgs(ctx, conn, extraOrgs)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, org := range os {
		for {
			var n int
			err := inOrg(ctx, conn, org, func(tx pgx.Tx) error {
				var err error
				n, err = embedBatch(ctx, tx, org, where, set, sp, embed, batch)
				return err
			})
			if err != nil {
				return total, fmt.Errorf("re-embedding org %s: %w", org, err)
			}
			total += n
			if n < batch {
				break
			}
		}
	}
	return total, nil
}

// Reembed fills embedding_next with sp's vectors for every memory not yet done (step 1).
// It returns how many rows it embedded.
func Reembed(ctx context.Context, conn *pgx.Conn, sp Space, embed Vectorize, batch int, extraOrgs ...string) (int, error) {
	return eachBatch(ctx, conn, extraOrgs, notNext, setNext, sp, embed, batch)
}

// Repair re-embeds in place the memories whose current vector is not of sp (rows written
// by a server still on the old model after the switch; step 4).
func Repair(ctx context.Context, conn *pgx.Conn, sp Space, embed Vectorize, batch int, extraOrgs ...string) (int, error) {
	return eachBatch(ctx, conn, extraOrgs, notCurrent, setCurrent, sp, embed, batch)
}

// SwitchSpace makes embedding_next (of space sp) the served column (step 3), in one
// transaction holding a SHARE ROW EXCLUSIVE lock (reads go on; writes wait): it embeds
// the stragglers, checks that every row has an sp vector, then renames the columns so
// `embedding` is the new one and `embedding_next` the old, and renames the indexes to
// match (dropping the old one). The caller must have built memories_hnsw_next_<dims>.
func SwitchSpace(ctx context.Context, conn *pgx.Conn, sp Space, embed Vectorize, extraOrgs ...string) error {
	os, err := orgs(ctx, conn, extraOrgs)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE memories IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		var oldDims int
		for _, org := range os {
			if err := pg.SetOrg(ctx, tx, org); err != nil {
				return err
			}
			for {
				n, err := embedBatch(ctx, tx, org, notNext, setNext, sp, embed, 256)
				if err != nil {
					return err
				}
				if n < 256 {
					break
				}
			}
			var left int
			if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(max(dims), 0) FROM memories WHERE org_id = $1 AND NOT (coalesce(next_embedder = $2 AND next_model = $3 AND next_dims = $4, false)
				OR (embedder = $2 AND model = $3 AND dims = $4))`, org, sp.Embedder, sp.Model, sp.Dims).Scan(&left, new(int)); err != nil {
				return err
			}
			if left > 0 {
				return fmt.Errorf("org %s still has %d memories without a %s/%s vector", org, left, sp.Embedder, sp.Model)
			}
			var d int
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(dims), 0) FROM memories WHERE org_id = $1`, org).Scan(&d); err != nil {
				return err
			}
			oldDims = max(oldDims, d)
		}
		// Rows already in sp (current column) need their vector copied to the next column
		// so the swap keeps them.
		for _, org := range os {
			if err := pg.SetOrg(ctx, tx, org); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE memories SET embedding_next = embedding, next_embedder = embedder,
				next_model = model, next_dims = dims WHERE org_id = $1 AND embedder = $2 AND model = $3 AND dims = $4
				AND next_model IS NULL`, org, sp.Embedder, sp.Model, sp.Dims); err != nil {
				return err
			}
		}
		for _, stmt := range []string{
			`ALTER TABLE memories RENAME COLUMN embedding TO embedding_swap`,
			`ALTER TABLE memories RENAME COLUMN embedding_next TO embedding`,
			`ALTER TABLE memories RENAME COLUMN embedding_swap TO embedding_next`,
			`ALTER TABLE memories RENAME COLUMN embedder TO embedder_swap`,
			`ALTER TABLE memories RENAME COLUMN next_embedder TO embedder`,
			`ALTER TABLE memories RENAME COLUMN embedder_swap TO next_embedder`,
			`ALTER TABLE memories RENAME COLUMN model TO model_swap`,
			`ALTER TABLE memories RENAME COLUMN next_model TO model`,
			`ALTER TABLE memories RENAME COLUMN model_swap TO next_model`,
			`ALTER TABLE memories RENAME COLUMN dims TO dims_swap`,
			`ALTER TABLE memories RENAME COLUMN next_dims TO dims`,
			`ALTER TABLE memories RENAME COLUMN dims_swap TO next_dims`,
			`ALTER TABLE memories ALTER COLUMN next_embedder DROP NOT NULL, ALTER COLUMN next_model DROP NOT NULL,
				ALTER COLUMN next_dims DROP NOT NULL, ALTER COLUMN embedding_next DROP NOT NULL`,
			`ALTER TABLE memories ALTER COLUMN embedder SET NOT NULL, ALTER COLUMN model SET NOT NULL,
				ALTER COLUMN dims SET NOT NULL, ALTER COLUMN embedding SET NOT NULL`,
			`ALTER TABLE memories DROP CONSTRAINT IF EXISTS memories_dims_check`,
			`ALTER TABLE memories ADD CONSTRAINT memories_dims_check CHECK (dims > 0)`,
			`DROP INDEX IF EXISTS memories_hnsw_` + strconv.Itoa(oldDims),
			`ALTER INDEX IF EXISTS memories_hnsw_next_` + strconv.Itoa(sp.Dims) + ` RENAME TO memories_hnsw_` + strconv.Itoa(sp.Dims),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	})
}

// ClearNext drops the previous model's vectors after a switch (step 5), in batches.
func ClearNext(ctx context.Context, conn *pgx.Conn, batch int, extraOrgs ...string) (int, error) {
	if batch <= 0 {
		batch = 1000
	}
	os, err := orgs(ctx, conn, extraOrgs)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, org := range os {
		for {
			var n int64
			err := inOrg(ctx, conn, org, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `UPDATE memories SET embedding_next = NULL, next_embedder = NULL, next_model = NULL,
					next_dims = NULL WHERE org_id = $1 AND id IN (SELECT id FROM memories WHERE org_id = $1
					AND next_dims IS NOT NULL LIMIT $2)`, org, batch)
				n = tag.RowsAffected()
				return err
			})
			if err != nil {
				return total, err
			}
			total += int(n)
			if int(n) < batch {
				break
			}
		}
	}
	return total, nil
}
