package httpapi

import (
	"github.com/strata-mem/strata/internal/strata"
)

// Page is the shared pagination input: `limit` (default 100, max 1000) and an opaque
// `cursor` from the previous page's next_cursor.
type Page struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" doc:"Page size (default 100, max 1000)."`
	Cursor string `query:"cursor" maxLength:"512" doc:"next_cursor of the previous page."`
}

func (p Page) limit() (int, error) {
	switch {
	case p.Limit == 0:
		return 100, nil
	case p.Limit < 1 || p.Limit > 1000:
		return 0, strata.Invalid("query.limit", "must be between 1 and 1000")
	}
	return p.Limit, nil
}

// List is the shape of every list response.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page."`
}

// page trims a limit+1 result to limit and sets the cursor from the last item kept.
func page[T any](items []T, limit int, cursor func(T) string) List[T] {
	l := List[T]{Items: items}
	if l.Items == nil {
		l.Items = []T{}
	}
	if len(items) > limit {
		l.Items = items[:limit]
		l.NextCursor = cursor(items[limit-1])
	}
	return l
}
