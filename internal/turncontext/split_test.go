package turncontext

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tiktoken-go/tokenizer"
)

// Counting a text piece by piece (cut after newlines, see Count) gives exactly what the
// tokenizer gives for the whole text: generated texts full of the cases that could break
// it (blank lines, CRLF, leading spaces and tabs, '/' after punctuation, Unicode spaces,
// digits, contractions, JSON, emoji), for every encoding.
func TestCountByPiecesIsExact(t *testing.T) {
	t.Parallel()
	frags := []string{
		"\n", "\n\n", "\r\n", " \n", "\t", "  ", " ", "/", "//", "/x", "}", "{", "\"", "'s", "'ll", "'S", ".", ",", ";", "...",
		"- ", "## ", "# Job", "step ", "done", "Colour", "grade", "teal", "LUT", "kodak-2383", "12345", "3.14", "0",
		`{"lut":"teal","strength":0.7}`, "https://example.com/a/b", "\u00a0", "\u2028", "\u3000", "\u0085", "\u202f",
		"é", "naïve", "日本語", "🙂", "👩‍💻", "\v", "\f", "-", "*", "> ", "1. ", "```", "```json", "\u00e9t\u00e9",
		"never re-do: render scene 3 (s3://bucket/job/step-03.mp4)", "next action: export for TikTok 9:16",
	}
	for _, enc := range []string{"o200k_base", "cl100k_base", "p50k_base", "r50k_base"} {
		c, err := NewCounter(enc)
		require.NoError(t, err)
		raw, err := tokenizer.Get(tokenizer.Encoding(enc))
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(7, uint64(len(enc))))
		for n := 0; n < 2000; n++ {
			var b strings.Builder
			for range 5 + rng.IntN(120) {
				b.WriteString(frags[rng.IntN(len(frags))])
			}
			s := b.String()
			want, err := raw.Count(s)
			require.NoError(t, err)
			require.Equal(t, want, c.Count(s), "%s: %q", enc, s)
			require.Equal(t, want, c.Count(s), "%s, cached: %q", enc, s)
		}
	}
}

// The packed prompts of a real context: the sum of pieces is the tokenizer's count.
func TestCountByPiecesPrompt(t *testing.T) {
	t.Parallel()
	prompt := "## Job (resume here; never re-do what is done)\njob: media-42 — edit the launch video\n" +
		"current step: colour\nnext action: grade scene 2 with the client's LUT\ndone (never re-do):\n" +
		"- cut: s3://bucket/media-42/cut.mp4 (12.3s)\n- reframe/9x16: {\"uri\":\"s3://b/r.mp4\"}\n\n" +
		"## Working state\n{\"scene\":2,\"lut\":\"kodak\",\"notes\":\"keep the second take\"}\n\n" +
		"## Preferences\n- prefs/style (user): {\"font\":\"Inter\",\"palette\":[\"#112233\"]}\n\n" +
		"## Relevant memories\n- [fact, 0.83] The client prefers warm tones; avoid jump cuts.\n" +
		"- [case] /export: use 12 Mbps for TikTok\n\n## Similar past jobs\n- old-7 (published): lut teal-3\n"
	for _, enc := range []string{"o200k_base", "cl100k_base"} {
		c, err := NewCounter(enc)
		require.NoError(t, err)
		raw, err := tokenizer.Get(tokenizer.Encoding(enc))
		require.NoError(t, err)
		want, err := raw.Count(prompt)
		require.NoError(t, err)
		require.Equal(t, want, c.Count(prompt), enc)
	}
}
