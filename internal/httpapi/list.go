package httpapi

import "github.com/strata-mem/strata/internal/api"

// page trims a limit+1 result to limit and sets the cursor from the last item kept.
func page[T any](items []T, limit int, cursor func(T) string) api.List[T] {
	l := api.List[T]{Items: items}
	if l.Items == nil {
		l.Items = []T{}
	}
	if len(items) > limit {
		l.Items = items[:limit]
		l.NextCursor = cursor(items[limit-1])
	}
	return l
}
