package graph

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMentionForms(t *testing.T) {
	t.Parallel()
	f := MentionForms("Did Ana's team visit the Lisbon  Store, or A. Silva?")
	for _, want := range []string{"ana", "ana's", "lisbon store", "a. silva", "lisbon", "did ana's team visit the"} {
		require.Contains(t, f, want)
	}
	require.NotContains(t, f, "store,")
	require.NotContains(t, f, "silva?")
	require.Empty(t, MentionForms("  "))
	require.LessOrEqual(t, len(MentionForms(string(make([]byte, 0))+longText(5000))), maxMentionForms)
}

func longText(n int) string {
	b := make([]byte, 0, 2*n)
	for i := 0; i < n; i++ {
		b = append(b, 'a'+byte(i%26), ' ')
	}
	return string(b)
}
