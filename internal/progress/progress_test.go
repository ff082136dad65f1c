package progress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// requirePlain fails when out holds a carriage return or an escape character
// (ANSI sequences start with one): what a pipe or a CI log must never receive.
func requirePlain(t *testing.T, out string) {
	t.Helper()
	require.NotContains(t, out, "\r", "a carriage return in %q", out)
	require.NotContains(t, out, "\x1b", "an escape sequence in %q", out)
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		require.Equal(t, strings.TrimSpace(l), l, "padding in %q", l)
	}
}

// fakeClock lets a test step time for the plain-line throttle without sleeping.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestPlainLinesIntoABuffer(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	b := New(&buf, 9, "media   job", Options{ShowCount: true, Every: 5 * time.Second})
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b.now, b.start = clk.now, clk.t
	b.Set(1) // the first update writes a line at once
	b.Set(2) // within Every: nothing
	clk.t = clk.t.Add(6 * time.Second)
	b.Describe("media job:\treframe")
	b.Add(2)
	clk.t = clk.t.Add(6 * time.Second)
	b.Set(4) // unchanged since the last line: nothing
	b.Set(5)
	b.Clear()
	b.Redraw()
	fmt.Fprintln(b.Writer(&buf), "a line of the job's own")
	clk.t = clk.t.Add(1 * time.Second)
	b.Set(7) // within Every of the last line: nothing until Finish
	b.Finish()
	out := buf.String()
	requirePlain(t, out)
	require.Equal(t, "media job: 1/9 (11%)\nmedia job: reframe: 4/9 (44%)\nmedia job: reframe: 5/9 (55%)\n"+
		"a line of the job's own\nmedia job: reframe: 7/9 (77%) (done in 13s)\n", out)
}

func TestPlainBytesAndUnknownTotal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	b := New(&buf, -1, "exporting", Options{Bytes: true})
	b.Add(3 << 20)
	b.Finish()
	requirePlain(t, buf.String())
	require.True(t, strings.HasPrefix(buf.String(), "exporting: 3.0 MiB\nexporting: 3.0 MiB (done in "), buf.String())

	buf.Reset()
	s := New(&buf, 30, "closed loop", Options{Unit: "s"})
	s.Set(30)
	require.Equal(t, "closed loop: 30s/30s (100%)\n", buf.String())
}

func TestHiddenAndNilDrawNothing(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	b := New(&buf, 3, "x", Options{Hidden: true})
	b.Set(1)
	b.Finish()
	require.Empty(t, buf.String())
	var none *Bar
	none.Set(1)
	none.Add(1)
	none.Describe("y")
	none.Finish()
	require.Same(t, io.Writer(&buf), none.Writer(&buf))
}

// A pipe, as `strata demo | cat` gives the command: *os.File, but not a terminal.
func TestPlainLinesIntoAPipe(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.False(t, IsTerminal(w))
	b := New(w, 4, "steps", Options{ShowCount: true, ClearOnFinish: true})
	for i := int64(1); i <= 4; i++ {
		b.Set(i)
	}
	b.Finish()
	require.NoError(t, w.Close())
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	requirePlain(t, string(out))
	require.Contains(t, string(out), "steps: 1/4 (25%)\nsteps: 4/4 (100%) (done in ")
}

// On a real terminal (a pseudo-terminal) the bar is drawn and redrawn in place.
func TestBarOnATerminal(t *testing.T) {
	t.Parallel()
	master, slave := openPTY(t)
	// Raw mode: no \n → \r\n translation, so every \r seen is the bar's own.
	_, err := term.MakeRaw(int(slave.Fd()))
	require.NoError(t, err)
	require.True(t, IsTerminal(slave))
	got := make(chan string)
	go func() {
		var all bytes.Buffer
		_, _ = io.Copy(&all, master) // ends with EIO once the slave is closed
		got <- all.String()
	}()
	b := New(slave, 4, "steps", Options{ShowCount: true, Throttle: time.Nanosecond})
	for i := int64(1); i <= 4; i++ {
		b.Set(i)
	}
	fmt.Fprintln(b.Writer(slave), "a line above the bar")
	b.Finish()
	require.NoError(t, slave.Close())
	out := <-got
	require.Contains(t, out, "\r", "the bar redraws in place")
	require.Contains(t, out, "steps")
	require.Contains(t, out, "4/4")
	require.Contains(t, out, "a line above the bar\n")
}

// openPTY opens a pseudo-terminal pair (master, slave) with the kernel's /dev/ptmx.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return m, s
}

// syncBuffer is a buffer a reader goroutine fills while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The demo's pattern on a terminal: a burst of lines above the bar, then the count, step
// after step, faster than the bar's throttle. The bar shows each step's count soon after
// it (a trailing draw), not 0 % until the end.
func TestBarOnATerminalFollowsBurstsOfUpdates(t *testing.T) {
	t.Parallel()
	master, slave := openPTY(t)
	_, err := term.MakeRaw(int(slave.Fd()))
	require.NoError(t, err)
	var out syncBuffer
	go func() { _, _ = io.Copy(&out, master) }()
	b := New(slave, 5, "media job", Options{ShowCount: true, ClearOnFinish: true, Throttle: 50 * time.Millisecond})
	w := b.Writer(slave)
	for i := 1; i <= 4; i++ {
		for _, what := range []string{"claimed", "rendered", "completed"} {
			fmt.Fprintf(w, "step %d %s\n", i, what)
		}
		b.Set(int64(i))
		marker := fmt.Sprintf("step %d completed\n", i)
		require.Eventually(t, func() bool {
			s := out.String()
			at := strings.LastIndex(s, marker)
			return at >= 0 && strings.Contains(s[at:], fmt.Sprintf("%d/5", i))
		}, 5*time.Second, 5*time.Millisecond, "the bar shows %d/5 after step %d: %q", i, i, out.String())
	}
	b.Finish()
}
