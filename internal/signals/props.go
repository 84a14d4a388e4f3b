package signals

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// maxSlots bounds a reported slot count: a larger one is not a fact.
const maxSlots = 1 << 20

// slots is the replica's slot count from the JSON endpoint path of its
// engine (llama.cpp's GET /props: total_slots, its --parallel), 0 while
// unknown. The count does not change while the engine runs, so it is
// asked until one answer comes: a count, or an HTTP error or a body
// without one (an engine or build without it, or one that wants an API
// key), after which it is not asked again; a failed connection is retried
// at the next scrape. Called by the loop's goroutine only.
func (l *loop) slots(ctx context.Context, path string) int {
	if path == "" || l.propsDone {
		return l.nSlots
	}
	ctx, cancel := context.WithTimeout(ctx, l.s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(l.target.URL, "/")+path, nil)
	if err != nil {
		l.propsDone = true
		return 0
	}
	resp, err := l.s.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	l.propsDone = true
	if resp.StatusCode != http.StatusOK {
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		return 0
	}
	var props struct {
		TotalSlots int `json:"total_slots"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&props) == nil &&
		props.TotalSlots > 0 && props.TotalSlots <= maxSlots {
		l.nSlots = props.TotalSlots
	}
	return l.nSlots
}
