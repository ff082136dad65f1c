package webhooks_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/apptest"
)

// delivery is one request a receiver got: the headers a verifier reads and the raw body.
type delivery struct {
	headers map[string]string
	body    []byte
}

// foreignVerify runs testdata/verify.js (Node's crypto, no Strata code) on d with secret,
// its clock at now (0: the real clock). It returns the signature that matched, or an error
// with the verifier's reason.
func foreignVerify(t *testing.T, secret string, d delivery, now int64) (string, error) {
	t.Helper()
	in := map[string]any{"secret": secret, "headers": d.headers, "body_base64": base64.StdEncoding.EncodeToString(d.body)}
	if now != 0 {
		in["now"] = now
	}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/verify.js")
	cmd.Stdin = bytes.NewReader(b)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return strings.TrimPrefix(out.String(), "ok "), nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return "", errors.New(out.String())
	default:
		t.Fatalf("running the Node verifier: %v\n%s", err, stderr.String())
		return "", nil
	}
}

// randomSecret is a secret made here, not by Strata: whsec_ and 32 random bytes in base64.
func randomSecret(t *testing.T) string {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// TestLiveDeliveryVerifiedByAForeignVerifier: a real server delivers to a real receiver, and
// a verifier written from the Standard Webhooks specification in Node (testdata/verify.js)
// checks what arrived (pings, and an event of a real write): the signature with the
// subscription's secret; after a rotation that keeps the old secret, two signatures, either
// secret accepted; after a rotation that
// retires it, the old secrets refused; a delivery replayed outside the 5-minute tolerance
// refused; a changed body refused.
func TestLiveDeliveryVerifiedByAForeignVerifier(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is not on PATH: this test verifies deliveries with Node's crypto (Node 20+)")
	}
	s := apptest.Start(t, apptest.Env("STRATA_WEBHOOK_ALLOW_PRIVATE", "true"), // the receiver is on loopback
		apptest.Env("STRATA_WEBHOOK_BACKOFF", "50ms"), apptest.Env("STRATA_WEBHOOK_TIMEOUT", "2s"))
	admin := s.NewKey("whv", "admin")

	got := make(chan delivery, 16)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		d := delivery{headers: map[string]string{}, body: b}
		for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			d.headers[k] = r.Header.Get(k)
		}
		got <- d
	}))
	t.Cleanup(rc.Close)
	next := func() delivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery within 20s")
			return delivery{}
		}
	}

	secretA := randomSecret(t)
	r := s.Do("POST", "/v1/admin/webhooks", admin, map[string]any{"url": rc.URL, "event_types": []string{"*"}, "secret": secretA})
	require.Equal(t, 201, r.Status, string(r.Body))
	id := r.Map(t)["id"].(string)
	ping := func() delivery {
		t.Helper()
		r := s.Do("POST", "/v1/admin/webhooks/"+id+"/ping", admin, nil)
		require.Equal(t, 202, r.Status, string(r.Body))
		return next()
	}

	// One secret: one signature, and it verifies.
	d := ping()
	require.Len(t, strings.Fields(d.headers["webhook-signature"]), 1)
	sig, err := foreignVerify(t, secretA, d, 0)
	require.NoError(t, err)
	require.Equal(t, d.headers["webhook-signature"], sig)
	_, err = foreignVerify(t, randomSecret(t), d, 0)
	require.EqualError(t, err, "no matching signature")

	// The tolerance: the same genuine delivery replayed 5 minutes and a second later is
	// refused (and one arriving from further ahead than that); just inside it, accepted.
	ts, err := strconv.ParseInt(d.headers["webhook-timestamp"], 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Unix(), ts, 60)
	_, err = foreignVerify(t, secretA, d, ts+301)
	require.EqualError(t, err, "timestamp too old")
	_, err = foreignVerify(t, secretA, d, ts-301)
	require.EqualError(t, err, "timestamp too new")
	_, err = foreignVerify(t, secretA, d, ts+299)
	require.NoError(t, err)
	// A changed body or a changed id is refused.
	tampered := delivery{headers: d.headers, body: bytes.Replace(d.body, []byte("webhook.ping"), []byte("webhook.pong"), 1)}
	_, err = foreignVerify(t, secretA, tampered, 0)
	require.EqualError(t, err, "no matching signature")
	otherID := delivery{headers: map[string]string{"webhook-id": d.headers["webhook-id"] + "x",
		"webhook-timestamp": d.headers["webhook-timestamp"], "webhook-signature": d.headers["webhook-signature"]}, body: d.body}
	_, err = foreignVerify(t, secretA, otherID, 0)
	require.EqualError(t, err, "no matching signature")

	// Rotation keeping the old secret for an hour: both sign every delivery meanwhile.
	r = s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", admin, map[string]any{"keep_previous_seconds": 3600}, "If-Match", `"1"`)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, `"2"`, r.Header.Get("ETag"))
	var rot struct {
		Secret                  string
		PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	}
	r.JSON(t, &rot)
	secretB := rot.Secret
	require.True(t, strings.HasPrefix(secretB, "whsec_"))
	require.NotEqual(t, secretA, secretB)
	require.NotNil(t, rot.PreviousSecretExpiresAt)
	require.WithinDuration(t, time.Now().Add(time.Hour), *rot.PreviousSecretExpiresAt, time.Minute)
	r = s.Do("GET", "/v1/admin/webhooks/"+id, admin, nil)
	require.NotContains(t, string(r.Body), secretB)
	require.Contains(t, string(r.Body), "previous_secret_expires_at")

	d = ping()
	sigs := strings.Fields(d.headers["webhook-signature"])
	require.Len(t, sigs, 2, d.headers["webhook-signature"])
	sig, err = foreignVerify(t, secretB, d, 0)
	require.NoError(t, err)
	require.Equal(t, sigs[0], sig) // the new secret's first
	sig, err = foreignVerify(t, secretA, d, 0)
	require.NoError(t, err)
	require.Equal(t, sigs[1], sig)
	_, err = foreignVerify(t, randomSecret(t), d, 0)
	require.EqualError(t, err, "no matching signature")
	_, err = foreignVerify(t, secretA, d, time.Now().Unix()+400)
	require.EqualError(t, err, "timestamp too old") // two signatures do not widen the tolerance
	// An event from a real write, fanned out by the dispatcher, is signed the same way.
	agent := s.NewKey("whv", "agent")
	r = s.Do("PUT", "/v1/jobs/whv-job", agent, map[string]any{"goal": "verify"})
	require.Less(t, r.Status, 300, string(r.Body))
	r = s.Do("POST", "/v1/jobs/whv-job/complete", agent, map[string]any{"status": "completed"})
	require.Equal(t, 200, r.Status, string(r.Body))
	d = next()
	require.Contains(t, string(d.body), `"type":"job.completed"`)
	require.Len(t, strings.Fields(d.headers["webhook-signature"]), 2)
	for _, secret := range []string{secretA, secretB} {
		_, err = foreignVerify(t, secret, d, 0)
		require.NoError(t, err)
	}

	// A rotation that retires the previous secret at once (a leaked secret): one signature,
	// neither older secret verifies any more, the new one does.
	secretC := randomSecret(t)
	r = s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", admin, map[string]any{"secret": secretC, "keep_previous_seconds": 0})
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, secretC, r.Map(t)["secret"])
	require.NotContains(t, r.Map(t), "previous_secret_expires_at")
	d = ping()
	require.Len(t, strings.Fields(d.headers["webhook-signature"]), 1)
	_, err = foreignVerify(t, secretC, d, 0)
	require.NoError(t, err)
	for _, old := range []string{secretA, secretB} {
		_, err = foreignVerify(t, old, d, 0)
		require.EqualError(t, err, "no matching signature")
	}

	// What a rotation refuses, writing nothing.
	for _, body := range []map[string]any{{"secret": "whsec_short"}, {"secret": "nope"}, {"keep_previous_seconds": -1},
		{"keep_previous_seconds": 2592001}} {
		r = s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", admin, body)
		require.Equal(t, 422, r.Status, string(r.Body))
	}
	require.Equal(t, 409, s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", admin, map[string]any{}, "If-Match", `"2"`).Status)
	require.Equal(t, 404, s.Do("POST", "/v1/admin/webhooks/nope/rotate-secret", admin, map[string]any{}).Status)
	other := s.NewKey("whv-other", "admin")
	require.Equal(t, 404, s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", other, map[string]any{}).Status)
	require.Equal(t, 403, s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", agent, map[string]any{}).Status)
	r = s.Do("GET", "/v1/admin/webhooks/"+id, admin, nil)
	require.Equal(t, `"3"`, r.Header.Get("ETag"))
	d = ping()
	_, err = foreignVerify(t, secretC, d, 0)
	require.NoError(t, err)

	// A retried rotation with its Idempotency-Key rotates once; the replay does not show the
	// secret again.
	r = s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", admin, map[string]any{"keep_previous_seconds": 0},
		"Idempotency-Key", "whv-rotate-1")
	require.Equal(t, 200, r.Status, string(r.Body))
	secretD := r.Map(t)["secret"].(string)
	r = s.Do("POST", "/v1/admin/webhooks/"+id+"/rotate-secret", admin, map[string]any{"keep_previous_seconds": 0},
		"Idempotency-Key", "whv-rotate-1")
	require.Equal(t, 200, r.Status, string(r.Body))
	require.NotEqual(t, secretD, r.Map(t)["secret"])
	require.NotContains(t, string(r.Body), secretD)
	require.Equal(t, `"4"`, s.Do("GET", "/v1/admin/webhooks/"+id, admin, nil).Header.Get("ETag"))
	d = ping()
	_, err = foreignVerify(t, secretD, d, 0)
	require.NoError(t, err)
}
