package keyvalue

import "sync"

// flightGroup collapses concurrent loads of one key into one (the singleflight pattern).
// It is golang.org/x/sync/singleflight reduced to what the store needs, plus a join hook so
// a test can tell deterministically that every caller is waiting on the same flight.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightCall struct {
	done chan struct{}
	n    int
	val  map[string]*cached
	err  error
}

// do runs fn once for all callers that ask for key while it runs, and gives each the
// result. join, if set, is called (under the group's lock) as each caller arrives.
func (g *flightGroup) do(key string, join func(string, int), fn func() (map[string]*cached, error)) (map[string]*cached, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*flightCall{}
	}
	if c, ok := g.calls[key]; ok {
		c.n++
		if join != nil {
			join(key, c.n)
		}
		g.mu.Unlock()
		<-c.done
		return c.val, c.err
	}
	c := &flightCall{done: make(chan struct{}), n: 1}
	g.calls[key] = c
	if join != nil {
		join(key, 1)
	}
	g.mu.Unlock()

	func() {
		defer func() {
			if r := recover(); r != nil {
				c.err = panicError{r}
			}
		}()
		c.val, c.err = fn()
	}()

	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
	close(c.done)
	if pe, ok := c.err.(panicError); ok {
		panic(pe.v)
	}
	return c.val, c.err
}

type panicError struct{ v any }

func (p panicError) Error() string { return "keyvalue: panic in a shared load" }
