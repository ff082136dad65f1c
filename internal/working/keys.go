package working

import (
	"strings"

	"github.com/strata-mem/strata/internal/strata"
)

// checkIDs refuses ids that could break the key layout (the HTTP layer validates them
// first; this is the store's own guard).
func checkIDs(org, session string) error {
	if err := strata.CheckID("org_id", org, false); err != nil {
		return err
	}
	return strata.CheckID("session", session, false)
}

// Key layout. Every key starts with the configured prefix. The two keys of one session
// share the hash tag {org/session}, so they live on one Redis Cluster slot and a Lua script
// may touch both. Ids are [A-Za-z0-9._:-], so "/" cannot occur inside them and the tag is
// unambiguous across tenants (org "a:b" + session "c" and org "a" + session "b:c" differ).
//
//	<prefix>ws:{<org>/<session>}:m      hash: state document, version, scope, TTL, turn seq
//	<prefix>ws:{<org>/<session>}:t      list: the newest turns, "<seq>\n<json>" each
//	<prefix>ws:org:{<org>}              set: session ids of the org
//	<prefix>ws:user:{<org>/<user>}      set: session ids of the data subject
//
// The index sets are maintained on every write and on restore; they may hold stale ids
// (expired sessions), which readers verify and prune. Erasure and export use them, plus
// the durable table, instead of KEYS or SCAN.
type keys struct{ meta, turns string }

func (s *Store) sessionKeys(org, session string) keys {
	// Both keys in one string (one allocation on every session read, not three).
	n := len(s.opt.Prefix) + len("ws:{/}:m") + len(org) + len(session)
	var b strings.Builder
	b.Grow(2 * n)
	for _, suffix := range []string{"}:m", "}:t"} {
		b.WriteString(s.opt.Prefix)
		b.WriteString("ws:{")
		b.WriteString(org)
		b.WriteString("/")
		b.WriteString(session)
		b.WriteString(suffix)
	}
	both := b.String()
	return keys{meta: both[:n], turns: both[n:]}
}

func (s *Store) orgIndexKey(org string) string { return s.opt.Prefix + "ws:org:{" + org + "}" }

func (s *Store) userIndexKey(org, user string) string {
	return s.opt.Prefix + "ws:user:{" + org + "/" + user + "}"
}
