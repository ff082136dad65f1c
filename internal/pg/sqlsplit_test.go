package pg_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/strata-mem/strata/internal/pg"
)

// TestSplitStatements: semicolons inside literals, quoted names, dollar-quoted bodies and
// comments do not end a statement; comment-only pieces are dropped.
func TestSplitStatements(t *testing.T) {
	t.Parallel()
	sql := `-- strata:phase expand
-- a comment; with a semicolon
CREATE TABLE "odd;name" (v text DEFAULT 'a;b''c;');
/* block; /* nested; */ still; */
DO $$ BEGIN PERFORM 1; END $$;
DO $body$ BEGIN RAISE NOTICE '$$;'; END $body$;
SELECT E'it\'s; fine', $1::text;
-- trailing comment only;
`
	require.Equal(t, []string{
		"-- strata:phase expand\n-- a comment; with a semicolon\nCREATE TABLE \"odd;name\" (v text DEFAULT 'a;b''c;')",
		"/* block; /* nested; */ still; */\nDO $$ BEGIN PERFORM 1; END $$",
		"DO $body$ BEGIN RAISE NOTICE '$$;'; END $body$",
		"SELECT E'it\\'s; fine', $1::text",
	}, pg.SplitStatements(sql))
	require.Empty(t, pg.SplitStatements("-- nothing\n;\n/* here */"))
}
