package router

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// The status page in a real browser (issue 25): headless Chromium, driven
// over the DevTools protocol. Skipped when no Chromium is installed, an
// error under CI=true (.ci/run installs it). Screenshots go to
// $LLM_RING_SCREENSHOTS when set.

// chromiumPath finds the browser, or skips (fails under CI).
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH: .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// browser is a headless Chromium showing one page, and a DevTools
// connection to that page.
type browser struct {
	t    *testing.T
	conn *websocket.Conn
	id   atomic.Int64
}

func openBrowser(t *testing.T, url string) *browser {
	t.Helper()
	// Not t.TempDir: Chromium's helper processes may still write to the
	// profile for a moment after the browser is gone, which fails the
	// testing package's own RemoveAll. The whole process group is killed and
	// the profile removed with retries.
	dir, err := os.MkdirTemp("", "llm-ring-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < 50 && os.RemoveAll(dir) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	cmd := exec.Command(chromiumPath(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+dir, "--remote-debugging-port=0", "--window-size=1500,1100", "--hide-scrollbars", url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the browser and every helper it started
		cmd.Wait()
	})
	// Chromium writes its DevTools port into the profile.
	var port string
	waitFor(t, "chromium's DevTools port", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort"))
		port, _, _ = strings.Cut(string(b), "\n")
		return err == nil && port != ""
	})
	var ws string
	waitFor(t, "the page's DevTools target", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		json.NewDecoder(resp.Body).Decode(&targets)
		for _, tg := range targets {
			if tg.Type == "page" && strings.HasPrefix(tg.URL, url) {
				ws = tg.WebSocketDebuggerURL
			}
		}
		return ws != ""
	})
	conn, _, err := websocket.Dial(context.Background(), ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadLimit(64 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	return &browser{t: t, conn: conn}
}

// call sends one DevTools command and returns its result.
func (b *browser) call(method string, params any, result any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := b.id.Add(1)
	msg, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err := b.conn.Write(ctx, websocket.MessageText, msg); err != nil {
		b.t.Fatal(err)
	}
	for {
		_, data, err := b.conn.Read(ctx)
		if err != nil {
			b.t.Fatalf("%s: %v", method, err)
		}
		var resp struct {
			ID     int64           `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		if json.Unmarshal(data, &resp) != nil || resp.ID != id {
			continue // an event
		}
		if resp.Error != nil {
			b.t.Fatalf("%s: %s", method, resp.Error.Message)
		}
		if result != nil {
			json.Unmarshal(resp.Result, result)
		}
		return
	}
}

// eval evaluates a JavaScript expression in the page and returns its value
// as JSON text.
func (b *browser) eval(expr string) string {
	var out struct {
		Result           struct{ Value any }
		ExceptionDetails *struct{ Text string }
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &out)
	if out.ExceptionDetails != nil {
		b.t.Fatalf("%s: %s", expr, out.ExceptionDetails.Text)
	}
	v, _ := json.Marshal(out.Result.Value)
	return string(v)
}

// screenshot saves a PNG of the page in $LLM_RING_SCREENSHOTS, if set.
func (b *browser) screenshot(name string) {
	dir := os.Getenv("LLM_RING_SCREENSHOTS")
	if dir == "" {
		return
	}
	var m struct {
		CSSContentSize struct{ Width, Height float64 }
	}
	b.call("Page.getLayoutMetrics", nil, &m)
	var out struct{ Data string }
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": m.CSSContentSize.Width, "height": m.CSSContentSize.Height, "scale": 1}}, &out)
	png, err := base64.StdEncoding.DecodeString(out.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestStatusPageInBrowser: the page loads, shows the replicas of a running
// router, and updates itself after traffic: decisions appear with their
// traces, the hit rate is drawn.
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser test")
	}
	chromiumPath(t)
	fast := func(o *replica.Options) { o.Clock, o.Speed = nil, 100 }
	rs := []replicaset.Replica{simReplica(t, "llm-0", fast), simReplica(t, "llm-1", fast), simReplica(t, "llm-2", fast)}
	h := newHarness(t, "llm-aware", 0, withAdmin(t, "s3cret"), func(c *config.Router) {
		c.Discovery.Static = rs
		c.Signals.Interval = config.Duration(100 * time.Millisecond)
	})
	s := serveWith(t, h)
	admin := httptest.NewServer(h.rt.AdminHandler())
	t.Cleanup(admin.Close)
	waitFor(t, "three healthy replicas", func() bool {
		st := h.rt.Table().Status()
		return len(st.Replicas) == 3 && st.Healthy() == 3
	})

	b := openBrowser(t, admin.URL+"/")
	waitFor(t, "the replicas on the page", func() bool {
		return b.eval(`document.querySelectorAll("#replicas tbody tr").length`) == "3"
	})
	if got := b.eval(`[...document.querySelectorAll("#replicas tbody tr")].map(r => r.dataset.replica).join(",")`); got != `"llm-0,llm-1,llm-2"` {
		t.Errorf("replica rows %s", got)
	}
	if got := b.eval(`document.querySelector("#healthy").textContent`); got != `"3 healthy of 3"` {
		t.Errorf("header: %s", got)
	}
	if got := b.eval(`document.querySelectorAll("#decisions tbody tr").length`); got != "0" {
		t.Errorf("decisions before any traffic: %s", got)
	}
	if got := b.eval(`document.querySelector("#admission").offsetParent === null`); got != "true" {
		t.Errorf("the admission section is shown with admission off")
	}
	if got := b.eval(`document.querySelector("#poolsec").offsetParent === null`); got != "true" {
		t.Errorf("the pools section is shown without models")
	}
	b.screenshot("status-idle.png")

	for c := range 6 {
		for turn := 1; turn <= 3; turn++ {
			resp, _ := s.do(t, http.MethodPost, wire.PathChatCompletions,
				chatBody(strings.Repeat(fmt.Sprintf("conversation %d turn %d ", c, turn), 10), turn == 2),
				"x-conversation-id", fmt.Sprint("c", c))
			if resp.StatusCode != 200 {
				t.Fatalf("request: %d", resp.StatusCode)
			}
		}
	}
	waitFor(t, "the page to show 18 requests", func() bool {
		return b.eval(`document.body.dataset.requests`) == `"18"`
	})
	if got := b.eval(`document.querySelectorAll("#decisions tbody tr").length`); got != "18" {
		t.Errorf("decision rows after traffic: %s", got)
	}
	if got := b.eval(`document.querySelector("#decisions pre").textContent.startsWith("llm-aware")`); got != "true" {
		t.Errorf("the newest decision's trace does not start with the policy: %s", b.eval(`document.querySelector("#decisions pre").textContent`))
	}
	hit := b.eval(`document.querySelector("#chart-hit_rate .value").textContent`)
	if hit == `"–"` || hit == `"0.0%"` {
		t.Errorf("hit rate after repeated turns: %s", hit)
	}
	b.eval(`document.querySelector("#decisions details").open = true`)
	b.screenshot("status-traffic.png")
}

// TestStatusPageAdmissionInBrowser: at a configured path (admin.status_path)
// and with admission on, the page shows the admission queue and follows it:
// one request waiting while the pool is saturated, none once it drains.
func TestStatusPageAdmissionInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser test")
	}
	chromiumPath(t)
	capacity := 3
	h := newHarness(t, "least-loaded", 1, withAdmin(t, "s3cret"), func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, QueueThreshold: 1, QueueCapacity: &capacity}
		c.Admin.StatusPath = "/ops/board"
	})
	f := h.fakes[0]
	f.hold = make(chan struct{})
	admin := httptest.NewServer(h.rt.AdminHandler())
	t.Cleanup(admin.Close)
	var wg sync.WaitGroup
	out := make(chan [2]int, 4)
	for n := 1; n <= 2; n++ {
		h.send(context.Background(), &wg, n, "", out)
	}
	waitFor(t, "two requests at the replica", func() bool { return f.calls.Load() == 2 })
	h.send(context.Background(), &wg, 3, "", out)
	waitFor(t, "one request queued", func() bool { return h.rt.adm.queued() == 1 })

	b := openBrowser(t, admin.URL+"/ops/board")
	waitFor(t, "the queue on the page", func() bool {
		return b.eval(`(document.querySelector("#admission-queued") || {}).textContent`) == `"1"`
	})
	if got := b.eval(`document.querySelector("#admission").offsetParent !== null`); got != "true" {
		t.Errorf("the admission section is hidden with admission on")
	}
	if got := b.eval(`document.querySelector("#admission .badge").textContent`); got != `"saturated"` {
		t.Errorf("pool badge %s, want saturated", got)
	}
	b.screenshot("status-admission.png")
	close(f.hold)
	wg.Wait()
	waitFor(t, "the queue drained on the page", func() bool {
		return b.eval(`document.querySelector("#admission-queued").textContent`) == `"0"`
	})
}

// TestStatusPagePoolsInBrowser: with replicas serving different models,
// the page shows each replica's models and the pools by model (issue 23).
func TestStatusPagePoolsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser test")
	}
	chromiumPath(t)
	fast := func(o *replica.Options) { o.Clock, o.Speed = nil, 100 }
	a, b2 := simReplica(t, "llm-0", fast), simReplica(t, "llm-1", fast)
	a.Models = []replicaset.Model{{Name: "model-a"}, {Name: "sql-lora", Parent: "model-a"}}
	b2.Models = []replicaset.Model{{Name: "model-b"}}
	h := newHarness(t, "llm-aware", 0, withAdmin(t, "s3cret"), func(c *config.Router) {
		c.Discovery.Static = []replicaset.Replica{a, b2}
	})
	serveWith(t, h)
	admin := httptest.NewServer(h.rt.AdminHandler())
	t.Cleanup(admin.Close)
	b := openBrowser(t, admin.URL+"/")
	waitFor(t, "the pools on the page", func() bool {
		return b.eval(`document.querySelectorAll("#pools tbody tr").length`) == "3"
	})
	if got := b.eval(`[...document.querySelectorAll("#pools tbody tr")].map(r => r.dataset.model + "=" + r.cells[3].textContent).join(",")`); got != `"=0,model-a=1,model-b=1"` {
		t.Errorf("pool rows %s", got)
	}
	if got := b.eval(`document.querySelector("#replicas tbody tr").cells[1].textContent`); got != `"model-a, sql-lora (model-a)"` {
		t.Errorf("llm-0's models: %s", got)
	}
	b.screenshot("status-pools.png")
}
