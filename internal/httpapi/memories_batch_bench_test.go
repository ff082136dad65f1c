package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	pgvector "github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/strata-mem/strata/internal/apptest"
	"github.com/strata-mem/strata/internal/embed"
	"github.com/strata-mem/strata/internal/semantic"
	"github.com/strata-mem/strata/internal/testenv"
)

// BenchmarkMemoryBatch is the batch ingest's row of make bench (issue 42, item 4): POST
// /v1/memories/batch, 1,000 memories per request (HTTP, auth, the request transaction, the
// Idempotency-Key, embedding with the built-in embedder chunk by chunk while the previous
// chunk inserts, the scope locks, exact and near duplicate checks against the store and the
// batch, one INSERT per chunk, the audit record, COMMIT) against its floor in the same run,
// interleaved batch by batch: a bare multi-row INSERT of as many rows (vectors computed
// beforehand) into the same HNSW-indexed partition of memories (the same org, users of its
// own), one statement in one transaction, as the owner (no RLS). Each batch spreads over 100
// users, as an imported corpus does; the near-duplicate check compares each item with its
// scope's memories, read once per batch, so one huge scope costs more (docs/semantic.md). b.N is the number of batches on each
// side; one run is one round (a server and database of its own), so -count 3 gives the three
// rounds whose median and range cmd/benchreport reports. Metrics: strata-rows/s,
// floor-rows/s and speed (strata ÷ floor). Target: speed ≥ 0.8.
//
//	go test -run '^$' -bench BenchmarkMemoryBatch -benchtime 3x -count 3 ./internal/httpapi/
func BenchmarkMemoryBatch(b *testing.B) {
	size := 1000
	if v := os.Getenv("STRATA_BENCH_BATCH"); v != "" {
		size, _ = strconv.Atoi(v)
	}
	const users = 100 // a corpus of many users, as an import brings (10 memories per user per batch)
	s := apptest.Start(b, apptest.Env("STRATA_RATE_LIMIT", "0"))
	const org = "bench"
	key := s.NewKey(org, "agent")
	ctx := context.Background()
	owner := testenv.OwnerConn(b, s.DBURL)
	if err := pgxvec.RegisterTypes(ctx, owner); err != nil {
		b.Fatal(err)
	}
	lex := embed.NewLexical(384)
	hc := &http.Client{Timeout: 5 * time.Minute}
	batchNo := 0
	texts := func(side string) []string {
		batchNo++
		out := make([]string, size)
		for i := range out {
			// Distinct words per memory: nothing in a batch is a near duplicate.
			out[i] = fmt.Sprintf("%s batch %d memory %d: shot s%dq%d graded g%dk%d for channel c%dm%d", side, batchNo, i,
				batchNo, i, batchNo, i*7, batchNo, i*13)
		}
		return out
	}
	floor := func() time.Duration {
		ts := texts("floor")
		var sb strings.Builder
		sb.WriteString(`INSERT INTO memories (org_id, id, root_id, version, user_id, agent_id, session_id, kind, text,
			text_hash, metadata, importance, pinned, trust, created_by_key, source_agent_id, source_job_id, embedding,
			embedder, model, dims, valid_from, updated_at) VALUES `)
		args := make([]any, 0, size*6)
		now := time.Now().UTC()
		for i, t := range ts {
			if i > 0 {
				sb.WriteString(",")
			}
			n := len(args)
			// The org's partition (its HNSW index holds Strata's rows too), users of its own.
			fmt.Fprintf(&sb, "('%s', $%d, $%d, 1, 'floor-u%d', '', '', 'fact', $%d, $%d, '{}', 0.5, false, 'agent_inferred', '', '', '', $%d, 'lexical', '%s', 384, $%d, $%d)",
				org, n+1, n+1, i%users, n+2, n+3, n+4, embed.LexicalModel, n+5, n+5)
			args = append(args, uuid.Must(uuid.NewV7()), t, semantic.TextHash(t), pgvector.NewVector(lex.One(t)), now)
		}
		sql := sb.String()
		t0 := time.Now()
		if err := pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	api := func() time.Duration {
		ts := texts("strata")
		items := make([]map[string]any, size)
		for i, t := range ts {
			items[i] = map[string]any{"text": t, "user_id": fmt.Sprintf("u%d", i%users)}
		}
		body, _ := json.Marshal(map[string]any{"memories": items})
		req, _ := http.NewRequest("POST", s.URL+"/v1/memories/batch", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var out struct{ Created int }
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		d := time.Since(t0)
		if err != nil || resp.StatusCode != 200 || out.Created != size {
			b.Fatalf("batch: status %d, created %d, %v", resp.StatusCode, out.Created, err)
		}
		return d
	}
	floor() // warm both (connections, plans, the index's first pages)
	api()
	var floorT, apiT time.Duration
	b.ResetTimer()
	for range b.N {
		floorT += floor()
		apiT += api()
	}
	b.StopTimer()
	rows := float64(b.N * size)
	b.Logf("round: strata %.0f rows/s, floor %.0f rows/s, speed %.3f (%d batches of %d each, interleaved)",
		rows/apiT.Seconds(), rows/floorT.Seconds(), floorT.Seconds()/apiT.Seconds(), b.N, size)
	b.ReportMetric(rows/apiT.Seconds(), "strata-rows/s")
	b.ReportMetric(rows/floorT.Seconds(), "floor-rows/s")
	b.ReportMetric(floorT.Seconds()/apiT.Seconds(), "speed")
}
