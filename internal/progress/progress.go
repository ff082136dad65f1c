// Package progress shows how far a long command is: a progress bar (progressbar/v3, redrawn
// in place with carriage returns) when the writer is a terminal, and plain lines otherwise —
// a pipe, a file, a CI log (`strata demo | cat`) gets "what: 3/9" lines at most every few
// seconds and one at the end, with no carriage returns, padding or ANSI escapes. The CLI,
// the demo and the load test draw their progress through it.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Options shape a bar. The zero value is a count bar, 30 columns wide on a terminal.
type Options struct {
	Hidden          bool          // draw nothing at all (--no-progress, JSON output)
	Width           int           // the bar's width on a terminal (default 30)
	Bytes           bool          // the counts are bytes
	Unit            string        // the counts' unit, e.g. "s" (default none)
	Percent         bool          // the count is a percentage (total 100): plain lines say "40%"
	ShowCount       bool          // a terminal bar shows "n/total" too
	PredictTime     bool          // a terminal bar shows the time left
	ElapsedOnFinish bool          // a terminal bar shows the time taken when finished
	ClearOnFinish   bool          // a terminal bar is erased when finished
	Throttle        time.Duration // a terminal bar is redrawn at most this often (default 100 ms)
	Every           time.Duration // a plain line is written at most this often (default 5 s)
}

// Bar is one progress display. Its methods are safe for concurrent use; a nil *Bar does
// nothing.
type Bar struct {
	mu      sync.Mutex
	tty     *progressbar.ProgressBar // on a terminal
	w       io.Writer                // plain lines (nil: hidden, or a terminal)
	o       Options
	desc    string
	total   int64 // -1: unknown
	cur     int64
	printed bool
	lastAt  time.Time
	last    string // the last plain line written
	start   time.Time
	now     func() time.Time
	// On a terminal the bar throttles its redraws itself (progressbar's own throttle drops
	// an update that comes too soon and draws it only with the next one, so a bar whose
	// updates come in bursts — a line above it, then its count — showed a stale count, or
	// 0 %, until the end): an update within Throttle of the last draw is drawn when the
	// throttle ends (timer), and Redraw always draws the current count.
	drawnAt time.Time   // the last draw on a terminal
	synced  int64       // the count the terminal bar was last given
	timer   *time.Timer // a pending trailing draw
	done    bool
}

// IsTerminal reports whether w is a terminal (an *os.File on a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && f != nil && term.IsTerminal(int(f.Fd()))
}

// New makes a bar over total units (-1: unknown) described by desc, written to w: a redrawn
// bar when w is a terminal, plain lines otherwise.
func New(w io.Writer, total int64, desc string, o Options) *Bar {
	if o.Width == 0 {
		o.Width = 30
	}
	if o.Throttle == 0 {
		o.Throttle = 100 * time.Millisecond
	}
	if o.Every == 0 {
		o.Every = 5 * time.Second
	}
	b := &Bar{o: o, desc: desc, total: total, now: time.Now}
	b.start = b.now()
	if o.Hidden || w == nil {
		return b
	}
	if !IsTerminal(w) {
		b.w = w
		return b
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc), progressbar.OptionSetWidth(o.Width),
		progressbar.OptionThrottle(0), progressbar.OptionSetPredictTime(o.PredictTime), // Bar throttles (draw)
	}
	if o.ShowCount {
		opts = append(opts, progressbar.OptionShowCount())
	}
	if o.Bytes {
		opts = append(opts, progressbar.OptionShowBytes(true))
	}
	if o.Unit != "" {
		opts = append(opts, progressbar.OptionSetItsString(o.Unit))
	}
	if o.ElapsedOnFinish {
		opts = append(opts, progressbar.OptionShowElapsedTimeOnFinish())
	}
	if o.ClearOnFinish {
		opts = append(opts, progressbar.OptionClearOnFinish())
	}
	b.tty = progressbar.NewOptions64(total, opts...)
	return b
}

// Set moves the bar to n.
func (b *Bar) Set(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = n
	if b.tty != nil {
		b.draw()
		return
	}
	b.plain(false)
}

// Add moves the bar on by n.
func (b *Bar) Add(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur += n
	if b.tty != nil {
		b.draw()
		return
	}
	b.plain(false)
}

// Describe changes the bar's description (shown at the next redraw or line).
func (b *Bar) Describe(desc string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.desc = desc
	if b.tty != nil {
		b.tty.Describe(desc)
	}
}

// Finish completes the bar: a terminal bar is drawn full (or erased with ClearOnFinish); a
// plain display writes its final line with the count reached (not the total: a command
// that stopped early says how far it got).
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tty != nil {
		b.done = true
		if b.timer != nil {
			b.timer.Stop()
			b.timer = nil
		}
		b.sync()
		_ = b.tty.Finish()
		return
	}
	b.plain(true)
}

// Clear erases a terminal bar so that a line can be written above it (Redraw puts it
// back). Plain displays have nothing to erase.
func (b *Bar) Clear() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tty != nil {
		_ = b.tty.Clear()
	}
}

// Redraw draws a terminal bar again after Clear.
func (b *Bar) Redraw() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.redraw()
}

// redraw is Redraw with b.mu held.
func (b *Bar) redraw() {
	if b.tty != nil && !b.done {
		if b.synced != b.cur {
			b.sync()
		}
		_ = b.tty.RenderBlank()
		b.drawnAt = b.now()
	}
}

// draw draws the terminal bar's count now, or when the throttle since the last draw ends.
// b.mu is held.
func (b *Bar) draw() {
	if b.done {
		return
	}
	wait := b.o.Throttle - b.now().Sub(b.drawnAt)
	if wait <= 0 {
		b.sync()
		return
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(wait, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.timer = nil
			if !b.done {
				b.sync()
			}
		})
	}
}

// sync gives the terminal bar the current count (progressbar draws it). b.mu is held.
func (b *Bar) sync() {
	_ = b.tty.Set64(b.cur)
	b.synced, b.drawnAt = b.cur, b.now()
}

// Writer returns a writer for lines that should appear above the bar: on a terminal each
// write clears the bar, writes, and redraws it; otherwise it is w itself.
func (b *Bar) Writer(w io.Writer) io.Writer {
	if b == nil || b.tty == nil {
		return w
	}
	return above{b: b, w: w}
}

type above struct {
	b *Bar
	w io.Writer
}

func (a above) Write(p []byte) (int, error) {
	// Under the bar's lock throughout: a trailing draw (draw's timer) must not land between
	// the clearing and the line.
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	_ = a.b.tty.Clear()
	n, err := a.w.Write(p)
	a.b.redraw()
	return n, err
}

// plain writes a line when the state changed and the last line is at least Every old (or
// this is the first, or the final one). b.mu is held.
func (b *Bar) plain(final bool) {
	if b.w == nil {
		return
	}
	now := b.now()
	if !final && b.printed && now.Sub(b.lastAt) < b.o.Every {
		return
	}
	line := b.line()
	if final {
		line += fmt.Sprintf(" (done in %s)", now.Sub(b.start).Round(100*time.Millisecond))
	} else if line == b.last {
		return
	}
	fmt.Fprintln(b.w, line)
	b.printed, b.lastAt, b.last = true, now, line
}

// line is the state as one line of text: single spaces, no control characters.
func (b *Bar) line() string {
	desc := strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, b.desc)), " ")
	count := b.amount(b.cur)
	switch {
	case b.o.Percent:
		count = fmt.Sprintf("%d%%", b.cur)
	case b.total >= 0:
		count += "/" + b.amount(b.total)
		if b.total > 0 {
			count += fmt.Sprintf(" (%d%%)", b.cur*100/b.total)
		}
	}
	if desc == "" {
		return count
	}
	return desc + ": " + count
}

func (b *Bar) amount(n int64) string {
	if b.o.Bytes {
		return bytesText(n)
	}
	return fmt.Sprintf("%d%s", n, b.o.Unit)
}

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
