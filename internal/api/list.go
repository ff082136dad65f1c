package api

import (
	"github.com/strata-mem/strata/internal/strata"
)

// Page is the shared pagination input: `limit` (default 100, max 1000) and an opaque
// `cursor` from the previous page's next_cursor.
type Page struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" doc:"Page size (default 100, max 1000)."`
	Cursor string `query:"cursor" maxLength:"512" doc:"next_cursor of the previous page."`
}

func (p Page) Size() (int, error) {
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
