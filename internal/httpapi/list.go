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

// listPage is one page of a list: fetch reads up to n rows (the page's size plus one, so
// that a next page is known without a count), and the page is trimmed to its size.
func listPage[T any](p api.Page, cursor func(T) string, fetch func(n int) ([]T, error)) (api.List[T], error) {
	limit, err := p.Size()
	if err != nil {
		return api.List[T]{}, err
	}
	items, err := fetch(limit + 1)
	if err != nil {
		return api.List[T]{}, err
	}
	return page(items, limit, cursor), nil
}
