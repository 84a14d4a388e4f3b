package experiment

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress shows a run's progress on stderr:
//
//	[bounded seed 1] 312/730 requests  43%  elapsed 0:41  ETA 0:54  errors 0
//
// On a terminal the line is redrawn in place at most every redrawEvery; on
// anything else a line is printed each time another 10 % is done.
type progress struct {
	w        io.Writer // nil: silent
	terminal bool
	label    string
	expected int
	start    time.Time
	now      func() time.Time

	mu       sync.Mutex
	done     int
	errors   int
	decile   int // last decile printed (non-terminal)
	width    int // length of the last line drawn (terminal)
	quit     chan struct{}
	finished chan struct{}
}

const redrawEvery = 250 * time.Millisecond

func newProgress(w io.Writer, terminal bool, label string, expected int) *progress {
	p := &progress{w: w, terminal: terminal, label: label, expected: expected, start: time.Now(), now: time.Now}
	if w != nil && terminal {
		p.quit, p.finished = make(chan struct{}), make(chan struct{})
		go p.redraw()
	}
	return p
}

func (p *progress) redraw() {
	defer close(p.finished)
	t := time.NewTicker(redrawEvery)
	defer t.Stop()
	for {
		p.mu.Lock()
		p.drawLocked()
		p.mu.Unlock()
		select {
		case <-p.quit:
			return
		case <-t.C:
		}
	}
}

// add counts a finished request.
func (p *progress) add(failed bool) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if failed {
		p.errors++
	}
	if p.terminal || p.expected == 0 {
		return
	}
	if d := p.done * 10 / p.expected; d > p.decile {
		p.decile = d
		fmt.Fprintln(p.w, p.line())
	}
}

// note prints a message on a line of its own.
func (p *progress) note(format string, args ...any) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := fmt.Sprintf("[%s] ", p.label) + fmt.Sprintf(format, args...)
	if p.terminal {
		fmt.Fprintf(p.w, "\r%s%s\n", msg, strings.Repeat(" ", max(0, p.width-len(msg))))
		p.width = 0
		p.drawLocked()
		return
	}
	fmt.Fprintln(p.w, msg)
}

// finish stops redrawing and prints the final line.
func (p *progress) finish(summary string) {
	if p.w == nil {
		return
	}
	if p.quit != nil {
		close(p.quit)
		<-p.finished
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		p.drawLocked()
		fmt.Fprintln(p.w)
	} else if p.decile < 10 {
		fmt.Fprintln(p.w, p.line()) // the last line shows where the run stopped
	}
	if summary != "" {
		fmt.Fprintf(p.w, "[%s] %s\n", p.label, summary)
	}
}

func (p *progress) drawLocked() {
	l := p.line()
	fmt.Fprintf(p.w, "\r%s%s", l, strings.Repeat(" ", max(0, p.width-len(l))))
	p.width = len(l)
}

func (p *progress) line() string {
	elapsed := p.now().Sub(p.start)
	pct := 0
	eta := "?"
	if p.expected > 0 {
		pct = min(100, p.done*100/p.expected)
	}
	if p.done > 0 && p.expected >= p.done {
		left := time.Duration(float64(elapsed) * float64(p.expected-p.done) / float64(p.done))
		eta = clock(left)
	}
	return fmt.Sprintf("[%s] %d/%d requests  %d%%  elapsed %s  ETA %s  errors %d",
		p.label, p.done, p.expected, pct, clock(elapsed), eta, p.errors)
}

// clock formats d as m:ss, or h:mm:ss from an hour.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
