package turncontext

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestContextCounterIsTheRealTokenizer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model, enc string
		text       string
		want       int
		estimated  bool
	}{
		// Reference counts from OpenAI's tiktoken.
		{"gpt-4o", "o200k_base", "hello world", 2, false},
		{"gpt-4", "cl100k_base", "hello world", 2, false},
		{"gpt-3.5-turbo", "cl100k_base", "tiktoken is great!", 6, false},
		{"cl100k_base", "cl100k_base", "antidisestablishmentarianism", 6, false},
		{"gpt-4.1-mini", "o200k_base", "", 0, false},
		{"claude-3-5-sonnet", "o200k_base", "hello world", 2, true},
	} {
		c, err := NewCounter(tc.model)
		require.NoError(t, err)
		require.Equal(t, tc.enc, c.Encoding(), tc.model)
		require.Equal(t, tc.estimated, c.Estimated(), tc.model)
		require.Equal(t, tc.want, c.Count(tc.text), "%s %q", tc.model, tc.text)
	}
	c, err := NewCounter("")
	require.NoError(t, err)
	require.Equal(t, DefaultModel, c.Model())
	long := strings.Repeat("the settled colour profile is warm teal; ", 50)
	require.Equal(t, c.Count(long), c.Count(long), "cached count equals the computed one")
	require.Greater(t, c.Count(long), 300)
}

func items(prefix string, n, words int) []Item {
	out := make([]Item, n)
	for i := range out {
		out[i] = Item{ID: fmt.Sprintf("%s%d", prefix, i), Text: "- " + strings.Repeat("word ", words), Order: i}
	}
	return out
}

func TestContextPackRespectsBudgetAndPriority(t *testing.T) {
	t.Parallel()
	c, err := NewCounter("gpt-4o")
	require.NoError(t, err)
	secs := []Section{
		{Name: SectionJob, Header: "## Job", Items: items("step", 3, 10)},
		{Name: SectionWorking, Note: "no session_id given"},
		{Name: SectionMemories, Header: "## Memories", Items: items("mem", 20, 30)},
	}
	// Everything fits in a large budget.
	all := Pack(c, 100000, secs)
	require.Equal(t, c.Count(all.Prompt), all.Tokens)
	for _, s := range all.Sections {
		require.Zero(t, s.LeftOutCount)
	}
	require.Equal(t, "no session_id given", all.Sections[1].Note)

	for _, budget := range []int{5, 40, 100, 250, 400} {
		r := Pack(c, budget, secs)
		require.LessOrEqual(t, r.Tokens, budget)
		require.Equal(t, c.Count(r.Prompt), r.Tokens)
		sum := 0
		for _, s := range r.Sections {
			require.Equal(t, s.Candidates, len(s.Included)+s.LeftOutCount)
			sum += s.Tokens
		}
		require.InDelta(t, r.Tokens, sum, 4, "sections add up to the whole (but for separators)")
		// Priority: the job's steps go in before any memory.
		if len(r.Sections[2].Included) > 0 {
			require.Len(t, r.Sections[0].Included, 3)
		}
	}
	r := Pack(c, 100, secs)
	require.Len(t, r.Sections[0].Included, 3)
	require.NotEmpty(t, r.Sections[2].LeftOut)
	require.Equal(t, "partial: the rest did not fit in the budget", r.Sections[2].Note)
	require.True(t, strings.HasPrefix(r.Prompt, "## Job\n- word"))

	// A smaller, later item still fits after a big one was left out.
	r = Pack(c, 30, []Section{{Name: SectionMemories, Header: "## M", Items: []Item{
		{ID: "big", Text: strings.Repeat("word ", 100)}, {ID: "small", Text: "tiny"}}}})
	require.Equal(t, []string{"small"}, r.Sections[0].Included)
	require.Equal(t, "big", r.Sections[0].LeftOut[0].ID)

	// Items are chosen by priority but rendered by Order.
	r = Pack(c, 1000, []Section{{Name: SectionJob, Header: "## J", Items: []Item{
		{ID: "b", Text: "second", Order: 2}, {ID: "a", Text: "first", Order: 1}}}})
	require.Equal(t, "## J\nfirst\nsecond", r.Prompt)
	require.Equal(t, []string{"b", "a"}, r.Sections[0].Included)
}
