package deploytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The verifier: a few clients writing through the load balancer, every write with an
// Idempotency-Key, every acknowledged one recorded in a ledger that is checked at the end
// in Postgres and through the API. A write that got no answer, a 5xx or a 409 "in
// progress" is retried with the same key until it is answered (up to retryFor), as a
// careful client would; each such attempt is counted by phase and status.

const (
	verifyOrg  = "deploy-verify"
	sharedJobs = 2 // event batches of all clients contend on these jobs
	retryFor   = 90 * time.Second
)

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r *reply) m() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.body, &m)
	return m
}

type stateAck struct {
	version int64
	marker  string
}

type verifier struct {
	base, key string
	hc        *http.Client
	phase     func() string

	mu        sync.Mutex
	attempted map[string]int
	acked     map[string]int
	// Non-2xx answers (or "transport") the clients saw and retried, by phase.
	seen   map[string]map[string]int
	gaveUp []string // writes never answered within retryFor (outcome unknown)
	// The ledger.
	mems         map[string]string // text → id
	memUnknown   []string
	events       map[string]int64 // marker → seq
	eventJob     map[string]string
	batchesAck   int
	evUnknown    [][]string
	kv           map[string]string // key → marker
	kvUnknown    []string
	states       map[string][]stateAck       // session → acknowledged writes in order
	cps          map[string]map[int64]string // job → version → next_action
	hotConflicts int                         // writes to the hot session refused because another writer was first (expected)
	conflicts    []string                    // If-Match writes refused although the ledger says the version is current
	stop         atomic.Bool
	ops          atomic.Int64
}

func newVerifier(base, key string, phase func() string) *verifier {
	return &verifier{base: base, key: key, phase: phase, hc: &http.Client{Timeout: 20 * time.Second},
		attempted: map[string]int{}, acked: map[string]int{}, seen: map[string]map[string]int{},
		mems: map[string]string{}, events: map[string]int64{}, eventJob: map[string]string{}, kv: map[string]string{},
		states: map[string][]stateAck{}, cps: map[string]map[int64]string{}}
}

func (v *verifier) do(ctx context.Context, method, path string, body any, hdr ...string) (*reply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, v.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+v.key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := v.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// call sends a write until it is answered; nil when it gave up.
func (v *verifier) call(kind, method, path string, body any, hdr ...string) *reply {
	v.mu.Lock()
	v.attempted[kind]++
	v.mu.Unlock()
	backoff := 50 * time.Millisecond
	for deadline := time.Now().Add(retryFor); time.Now().Before(deadline); {
		ph := v.phase()
		r, err := v.do(context.Background(), method, path, body, hdr...)
		why := ""
		switch {
		case err != nil:
			why = "transport"
		case r.status >= 500 || r.status == http.StatusTooManyRequests:
			why = fmt.Sprint(r.status)
		case r.status == http.StatusConflict && r.header.Get("Retry-After") != "":
			why = "409 in progress"
		default:
			if r.status < 300 {
				v.mu.Lock()
				v.acked[kind]++
				v.mu.Unlock()
			}
			return r
		}
		v.mu.Lock()
		if v.seen[ph] == nil {
			v.seen[ph] = map[string]int{}
		}
		v.seen[ph][why]++
		v.mu.Unlock()
		time.Sleep(backoff) // kept: a client's retry backoff against a server that is restarting or cut off
		backoff = min(2*backoff, 800*time.Millisecond)
	}
	v.mu.Lock()
	v.gaveUp = append(v.gaveUp, method+" "+path)
	v.mu.Unlock()
	return nil
}

// setup creates the jobs the clients write to.
func (v *verifier) setup(t *testing.T, clients int) {
	for j := 0; j < sharedJobs; j++ {
		r := v.call("setup", "PUT", fmt.Sprintf("/v1/jobs/dv-shared-%d", j), map[string]any{"goal": "deploy"}, "Idempotency-Key", fmt.Sprintf("dv-mk-shared-%d", j))
		if r == nil || r.status >= 300 {
			t.Fatalf("verifier setup: %+v", r)
		}
	}
	for i := 0; i < clients; i++ {
		r := v.call("setup", "PUT", fmt.Sprintf("/v1/jobs/dv-own-%d", i), map[string]any{"goal": "deploy"}, "Idempotency-Key", fmt.Sprintf("dv-mk-own-%d", i))
		if r == nil || r.status >= 300 {
			t.Fatalf("verifier setup: %+v", r)
		}
	}
}

func (v *verifier) unexpected(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.conflicts = append(v.conflicts, fmt.Sprintf(format, args...))
}

// client is one verifier client: it cycles through the five kinds of write until stop.
func (v *verifier) client(i int, pause time.Duration) {
	own := fmt.Sprintf("dv-own-%d", i)
	session := fmt.Sprintf("dv-session-%d", i)
	var cpVersion, stVersion int64
	for n := 0; !v.stop.Load(); n++ {
		v.ops.Add(1)
		key := fmt.Sprintf("dv-c%d-n%d", i, n)
		switch n % 5 {
		case 0: // a batch of two events on a shared job
			job := fmt.Sprintf("dv-shared-%d", (i+n)%sharedJobs)
			markers := []string{key + "-e0", key + "-e1"}
			evs := []map[string]any{{"op": "render", "params": map[string]any{"m": markers[0]}}, {"op": "render", "params": map[string]any{"m": markers[1]}}}
			r := v.call("event batch", "POST", "/v1/jobs/"+job+"/events", evs, "Idempotency-Key", key)
			v.mu.Lock()
			switch {
			case r == nil:
				v.evUnknown = append(v.evUnknown, markers)
			case r.status < 300:
				var out struct {
					Items []struct {
						Seq    int64          `json:"seq"`
						Params map[string]any `json:"params"`
					} `json:"items"`
				}
				_ = json.Unmarshal(r.body, &out)
				if len(out.Items) != 2 {
					v.conflicts = append(v.conflicts, fmt.Sprintf("%s: event batch answer without its 2 events: %s", key, r.body))
				}
				for _, e := range out.Items {
					m, _ := e.Params["m"].(string)
					v.events[m] = e.Seq
					v.eventJob[m] = job
				}
				v.batchesAck++
			default:
				v.conflicts = append(v.conflicts, fmt.Sprintf("%s: event batch answered %d: %s", key, r.status, r.body))
			}
			v.mu.Unlock()
		case 1: // a memory in a scope of its own (nothing to deduplicate it against)
			text := "deploy memory " + key
			r := v.call("memory", "POST", "/v1/memories", map[string]any{"text": text, "user_id": "dv-u-" + key}, "Idempotency-Key", key)
			v.mu.Lock()
			switch {
			case r == nil:
				v.memUnknown = append(v.memUnknown, text)
			case r.status == http.StatusCreated:
				id, _ := r.m()["id"].(string)
				v.mems[text] = id
			default:
				v.conflicts = append(v.conflicts, fmt.Sprintf("%s: memory answered %d: %s", key, r.status, r.body))
			}
			v.mu.Unlock()
		case 2: // a key-value put of a key of its own
			r := v.call("kv put", "PUT", "/v1/kv/dv/"+key, map[string]any{"value": map[string]any{"m": key}}, "Idempotency-Key", key)
			v.mu.Lock()
			switch {
			case r == nil:
				v.kvUnknown = append(v.kvUnknown, key)
			case r.status < 300:
				v.kv[key] = key
			default:
				v.conflicts = append(v.conflicts, fmt.Sprintf("%s: kv put answered %d: %s", key, r.status, r.body))
			}
			v.mu.Unlock()
		case 3: // the next version of the client's session state (If-Match chain)
			hdr := []string{"Idempotency-Key", fmt.Sprintf("dv-%s-st%d", session, stVersion)}
			if stVersion > 0 {
				hdr = append(hdr, "If-Match", fmt.Sprintf(`"%d"`, stVersion))
			}
			r := v.call("state write", "PUT", "/v1/sessions/"+session+"/state", map[string]any{"state": map[string]any{"m": key, "n": n}}, hdr...)
			if r == nil {
				return // the chain cannot go on without knowing the version
			}
			if r.status >= 300 {
				v.unexpected("%s: state write If-Match %d answered %d: %s (the ledger's last acknowledged version is %d)", key, stVersion, r.status, r.body, stVersion)
				return
			}
			ver, _ := r.m()["version"].(float64)
			if int64(ver) != stVersion+1 {
				v.unexpected("%s: state write on version %d acknowledged as version %v", key, stVersion, ver)
				return
			}
			stVersion = int64(ver)
			v.mu.Lock()
			v.states[session] = append(v.states[session], stateAck{version: stVersion, marker: key})
			v.mu.Unlock()
		case 4: // the next checkpoint of the client's own job (If-Match chain)
			r := v.call("checkpoint", "PUT", "/v1/jobs/"+own+"/checkpoint",
				map[string]any{"state": map[string]any{"n": n}, "next_action": "after " + key},
				"If-Match", fmt.Sprintf(`"%d"`, cpVersion), "Idempotency-Key", fmt.Sprintf("dv-%s-cp%d", own, cpVersion))
			if r == nil {
				return
			}
			if r.status >= 300 {
				v.unexpected("%s: checkpoint If-Match %d answered %d: %s", key, cpVersion, r.status, r.body)
				return
			}
			ver, _ := r.m()["version"].(float64)
			if int64(ver) != cpVersion+1 {
				v.unexpected("%s: checkpoint on version %d acknowledged as version %v", key, cpVersion, ver)
				return
			}
			cpVersion = int64(ver)
			v.mu.Lock()
			if v.cps[own] == nil {
				v.cps[own] = map[int64]string{}
			}
			v.cps[own][cpVersion] = "after " + key
			v.mu.Unlock()
		}
		time.Sleep(pause) // kept: paces the verifier to a modest rate beside the load mix
	}
}

// hotSession is the session the state writers contend on: each writes the next version
// with If-Match and, refused (409, someone else wrote), re-reads it and tries again. Two
// writes acknowledged at one version, or a durable row that is not the newest
// acknowledged write, is an acknowledged write lost (a Redis flush between a write and
// its durable half must not make that possible).
const hotSession = "dv-hot"

func (v *verifier) stateWriter(i int, pause time.Duration) {
	known := int64(-1)
	for n := 0; !v.stop.Load(); n++ {
		v.ops.Add(1)
		if known < 0 {
			r := v.read("/v1/sessions/" + hotSession + "/state")
			switch {
			case r == nil:
				return
			case r.status == http.StatusNotFound:
				known = 0
			case r.status == http.StatusOK:
				ver, _ := r.m()["version"].(float64)
				known = int64(ver)
			default:
				v.unexpected("hot state read answered %d: %s", r.status, r.body)
				return
			}
		}
		key := fmt.Sprintf("dv-hot-w%d-n%d", i, n)
		r := v.call("hot state write", "PUT", "/v1/sessions/"+hotSession+"/state", map[string]any{"state": map[string]any{"m": key}},
			"If-Match", fmt.Sprintf(`"%d"`, known), "Idempotency-Key", key)
		switch {
		case r == nil:
			return
		case r.status == http.StatusConflict:
			v.mu.Lock()
			v.hotConflicts++
			v.mu.Unlock()
			known = -1
		case r.status < 300:
			ver, _ := r.m()["version"].(float64)
			if int64(ver) != known+1 {
				v.unexpected("%s: hot state write on version %d acknowledged as version %v", key, known, ver)
			}
			known = int64(ver)
			v.mu.Lock()
			v.states[hotSession] = append(v.states[hotSession], stateAck{version: known, marker: key})
			v.mu.Unlock()
		default:
			v.unexpected("%s: hot state write answered %d: %s", key, r.status, r.body)
			return
		}
		time.Sleep(pause) // kept: paces the writer
	}
}

// read GETs path until a server answers below 500 (nil after retryFor).
func (v *verifier) read(path string) *reply {
	for deadline := time.Now().Add(retryFor); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // kept: a client's retry against a restarting server
		ph := v.phase()
		r, err := v.do(context.Background(), "GET", path, nil)
		if err == nil && r.status < 500 {
			return r
		}
		why := "transport"
		if err == nil {
			why = fmt.Sprint(r.status)
		}
		v.mu.Lock()
		if v.seen[ph] == nil {
			v.seen[ph] = map[string]int{}
		}
		v.seen[ph][why]++
		v.mu.Unlock()
	}
	v.mu.Lock()
	v.gaveUp = append(v.gaveUp, "GET "+path)
	v.mu.Unlock()
	return nil
}

// outcome is what the final check found.
type outcome struct {
	Attempted, Acknowledged map[string]int
	Missing, Duplicated     []string
	Unknown                 int // writes never answered (each must exist at most once)
	APIChecked              int
}

// check compares the ledger with Postgres (db: the owner, bypassing row-level security)
// and reads every acknowledged write back through the API.
func (v *verifier) check(ctx context.Context, db *pgx.Conn) (outcome, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	o := outcome{Attempted: v.attempted, Acknowledged: v.acked,
		Unknown: len(v.memUnknown) + len(v.evUnknown) + len(v.kvUnknown) + len(v.gaveUp)}
	missing := func(f string, a ...any) { o.Missing = append(o.Missing, fmt.Sprintf(f, a...)) }
	dup := func(f string, a ...any) { o.Duplicated = append(o.Duplicated, fmt.Sprintf(f, a...)) }

	// Events: every acknowledged event exactly once at its seq; per job seqs 1..n;
	// an unanswered batch all there or not at all; no event never sent.
	present := map[string][]int64{}
	for j := 0; j < sharedJobs; j++ {
		job := fmt.Sprintf("dv-shared-%d", j)
		rows, err := db.Query(ctx, `SELECT seq, params->>'m' FROM episodic_events WHERE org_id = $1 AND job_id = $2 ORDER BY seq`, verifyOrg, job)
		if err != nil {
			return o, err
		}
		var want int64 = 1
		for rows.Next() {
			var seq int64
			var m string
			if err := rows.Scan(&seq, &m); err != nil {
				return o, err
			}
			if seq != want {
				missing("%s: seq %d follows %d (a gap)", job, seq, want-1)
			}
			want = seq + 1
			present[m] = append(present[m], seq)
		}
		if err := rows.Err(); err != nil {
			return o, err
		}
	}
	for m, seq := range v.events {
		switch got := present[m]; {
		case len(got) == 0:
			missing("event %s (acknowledged at seq %d)", m, seq)
		case len(got) > 1:
			dup("event %s at seqs %v", m, got)
		case got[0] != seq:
			missing("event %s acknowledged at seq %d is at %d", m, seq, got[0])
		}
	}
	known := map[string]bool{}
	for m := range v.events {
		known[m] = true
	}
	for _, b := range v.evUnknown {
		n := 0
		for _, m := range b {
			known[m] = true
			n += len(present[m])
		}
		if n != 0 && n != len(b) {
			missing("unanswered batch %v half applied (%d of %d events)", b, n, len(b))
		}
	}
	for m, seqs := range present {
		if !known[m] {
			dup("event %s at %v was never sent", m, seqs)
		}
	}

	// Memories: each acknowledged one exactly once with its id.
	mems := map[string][]string{}
	rows, err := db.Query(ctx, `SELECT text, id::text FROM memories WHERE org_id = $1 AND text LIKE 'deploy memory %'`, verifyOrg)
	if err != nil {
		return o, err
	}
	for rows.Next() {
		var text, id string
		if err := rows.Scan(&text, &id); err != nil {
			return o, err
		}
		mems[text] = append(mems[text], id)
	}
	if err := rows.Err(); err != nil {
		return o, err
	}
	for text, id := range v.mems {
		switch got := mems[text]; {
		case len(got) == 0:
			missing("memory %q (id %s)", text, id)
		case len(got) > 1:
			dup("memory %q %d times", text, len(got))
		case got[0] != id:
			missing("memory %q acknowledged as %s is stored as %s", text, id, got[0])
		}
	}
	for _, text := range v.memUnknown {
		if len(mems[text]) > 1 {
			dup("unanswered memory %q %d times", text, len(mems[text]))
		}
	}

	// Key-value: each acknowledged key present with its value, written once (one version).
	type kvRow struct {
		m        string
		versions int
	}
	kvs := map[string]kvRow{}
	rows, err = db.Query(ctx, `SELECT e.key, coalesce(e.value->>'m', ''), (SELECT count(*) FROM kv_versions v
		WHERE v.org_id = e.org_id AND v.namespace = e.namespace AND v.key = e.key AND v.level = e.level AND v.scope_id = e.scope_id)
		FROM kv_entries e WHERE e.org_id = $1 AND e.namespace = 'dv'`, verifyOrg)
	if err != nil {
		return o, err
	}
	for rows.Next() {
		var k string
		var r kvRow
		if err := rows.Scan(&k, &r.m, &r.versions); err != nil {
			return o, err
		}
		kvs[k] = r
	}
	if err := rows.Err(); err != nil {
		return o, err
	}
	for k, m := range v.kv {
		switch got, ok := kvs[k]; {
		case !ok || got.m != m:
			missing("kv dv/%s = %s (found %+v)", k, m, got)
		case got.versions != 1:
			dup("kv dv/%s written %d times (versions)", k, got.versions)
		}
	}

	// Session state: the acknowledged versions 1..n in order, the durable row at the last
	// one with its content.
	for session, acks := range v.states {
		byVersion := map[int64][]string{}
		last := acks[0]
		for _, a := range acks {
			byVersion[a.version] = append(byVersion[a.version], a.marker)
			if a.version > last.version {
				last = a
			}
		}
		for ver, ms := range byVersion {
			if len(ms) > 1 {
				dup("state %s: %d writes acknowledged at version %d (%v): all but one are lost", session, len(ms), ver, ms)
			}
		}
		var ver int64
		var m string
		err := db.QueryRow(ctx, `SELECT version, coalesce(state->>'m', '') FROM working_sessions WHERE org_id = $1 AND session_id = $2`, verifyOrg, session).Scan(&ver, &m)
		switch {
		case err == pgx.ErrNoRows:
			missing("state %s: no durable row (last acknowledged version %d)", session, last.version)
		case err != nil:
			return o, err
		case ver != last.version || m != last.marker:
			missing("state %s: durable row at version %d (%s), last acknowledged %d (%s)", session, ver, m, last.version, last.marker)
		}
	}

	// Checkpoints: versions 1..n per job, each acknowledged one with its content.
	for job, acked := range v.cps {
		rows, err := db.Query(ctx, `SELECT version, next_action FROM job_checkpoints WHERE org_id = $1 AND job_id = $2 ORDER BY version`, verifyOrg, job)
		if err != nil {
			return o, err
		}
		got := map[int64]string{}
		var want int64 = 1
		for rows.Next() {
			var ver int64
			var next string
			if err := rows.Scan(&ver, &next); err != nil {
				return o, err
			}
			if ver != want {
				missing("checkpoint %s: version %d follows %d", job, ver, want-1)
			}
			want = ver + 1
			got[ver] = next
		}
		if err := rows.Err(); err != nil {
			return o, err
		}
		if len(got) > len(acked) {
			dup("checkpoint %s: %d versions stored, %d acknowledged", job, len(got), len(acked))
		}
		for ver, next := range acked {
			if got[ver] != next {
				missing("checkpoint %s version %d = %q (found %q)", job, ver, next, got[ver])
			}
		}
	}

	// Through the API: every acknowledged memory, key, state and latest checkpoint reads
	// back as acknowledged.
	get := func(path string) (*reply, error) {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) { // kept: a replica may still be recovering
			r, err := v.do(ctx, "GET", path, nil)
			if err == nil && r.status < 500 {
				return r, nil
			}
			if time.Now().After(deadline) {
				return r, fmt.Errorf("GET %s: %v %+v", path, err, r)
			}
		}
	}
	for text, id := range v.mems {
		r, err := get("/v1/memories/" + id)
		if err != nil {
			return o, err
		}
		o.APIChecked++
		if r.status != 200 || r.m()["text"] != text {
			missing("API: memory %s: %d %s", id, r.status, r.body)
		}
	}
	for k, m := range v.kv {
		r, err := get("/v1/kv/dv/" + k)
		if err != nil {
			return o, err
		}
		o.APIChecked++
		val, _ := r.m()["value"].(map[string]any)
		if r.status != 200 || val["m"] != m {
			missing("API: kv dv/%s: %d %s", k, r.status, r.body)
		}
	}
	for session, acks := range v.states {
		last := acks[0]
		for _, a := range acks {
			if a.version > last.version {
				last = a
			}
		}
		r, err := get("/v1/sessions/" + session + "/state")
		if err != nil {
			return o, err
		}
		o.APIChecked++
		st, _ := r.m()["state"].(map[string]any)
		ver, _ := r.m()["version"].(float64)
		if r.status != 200 || int64(ver) != last.version || st["m"] != last.marker {
			missing("API: state %s: want version %d (%s), got %d %s", session, last.version, last.marker, r.status, r.body)
		}
	}
	for job, acked := range v.cps {
		var top int64
		for ver := range acked {
			top = max(top, ver)
		}
		r, err := get(fmt.Sprintf("/v1/jobs/%s/checkpoints/%d", job, top))
		if err != nil {
			return o, err
		}
		o.APIChecked++
		if r.status != 200 || r.m()["next_action"] != acked[top] {
			missing("API: checkpoint %s/%d: %d %s", job, top, r.status, r.body)
		}
	}
	for j := 0; j < sharedJobs; j++ {
		job := fmt.Sprintf("dv-shared-%d", j)
		r, err := get("/v1/jobs/" + job + "/events?limit=1000")
		if err != nil {
			return o, err
		}
		o.APIChecked++
		var out struct {
			Items []struct {
				Params map[string]any `json:"params"`
			} `json:"items"`
		}
		_ = json.Unmarshal(r.body, &out)
		seen := map[string]bool{}
		for _, e := range out.Items {
			m, _ := e.Params["m"].(string)
			seen[m] = true
		}
		if len(out.Items) < 1000 { // the whole log fits one page: every acknowledged event is on it
			for m, j := range v.eventJob {
				if j == job && !seen[m] {
					missing("API: event %s not listed on %s", m, job)
				}
			}
		}
	}
	sort.Strings(o.Missing)
	sort.Strings(o.Duplicated)
	return o, nil
}
