package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/router"
)

// external drives an existing router: the policy is switched through its
// admin API (its own listener, with a bearer token), the extra replica comes and goes through shell commands, and
// readiness is read from GET /replicas. With several active-active
// instances (issue #13), the policy is switched on every instance's admin
// API, every instance must report the same replicas at the start, and
// readiness is read from the first.
type external struct {
	spec    *Spec
	client  *http.Client
	initial []string       // replica names at the run's start
	policy  map[string]any // GET /admin/policy after the switch
}

// PolicySwitch is the body the runner sends to PUT /admin/policy before each
// run: the run's policy, and a reset of placement memory and of the
// round-robin position, so that every run starts as on a fresh router.
type PolicySwitch struct {
	Policy string `json:"policy"`
	Reset  bool   `json:"reset"`
}

func (x *external) start(ctx context.Context, policyName string) ([]string, int, error) {
	body, _ := json.Marshal(PolicySwitch{Policy: policyName, Reset: true})
	urls, admins := x.spec.RouterURLs(), x.spec.AdminURLs()
	for _, admin := range admins {
		var got map[string]any
		if err := x.callAt(ctx, admin, http.MethodPut, "/admin/policy", body, &got); err != nil {
			return nil, 0, fmt.Errorf("switch the router's policy to %s at %s: %w", policyName, admin, err)
		}
		if got["policy"] != policyName {
			return nil, 0, fmt.Errorf("switch the router's policy to %s at %s: the router answered policy %v", policyName, admin, got["policy"])
		}
		x.policy = got
	}
	names, err := x.replicaNames(ctx)
	if err != nil {
		return nil, 0, err
	}
	if len(names) == 0 {
		return nil, 0, errors.New("the router has no ready replica")
	}
	if x.spec.Replicas > 0 && len(names) != x.spec.Replicas {
		return nil, 0, fmt.Errorf("the router has %d replicas (%s), expected %d", len(names), strings.Join(names, ", "), x.spec.Replicas)
	}
	for _, u := range urls[1:] {
		other, err := x.replicaNamesAt(ctx, u)
		if err != nil {
			return nil, 0, err
		}
		if !slices.Equal(other, names) {
			return nil, 0, fmt.Errorf("the router instances disagree on the replicas: %s has %s, %s has %s",
				urls[0], strings.Join(names, ", "), u, strings.Join(other, ", "))
		}
	}
	x.initial = names
	for i, u := range urls {
		urls[i] = strings.TrimSuffix(u, "/")
	}
	return urls, len(names), nil
}

// scale runs the scale command, then waits for a replica that was not there
// at the run's start to appear in GET /replicas.
func (x *external) scale(ctx context.Context) (string, error) {
	if err := x.exec(ctx, x.spec.ScaleCmd); err != nil {
		return "", err
	}
	var added string
	err := x.waitFor(ctx, func(names []string) bool {
		for _, n := range names {
			if !slices.Contains(x.initial, n) {
				added = n
				return true
			}
		}
		return false
	})
	return added, err
}

// stop runs the unscale command after a scale-up and waits until the
// router's replicas are those of the run's start again.
func (x *external) stop(ctx context.Context, scaled bool) error {
	if !scaled {
		return nil
	}
	if err := x.exec(ctx, x.spec.UnscaleCmd); err != nil {
		return err
	}
	return x.waitFor(ctx, func(names []string) bool { return slices.Equal(names, x.initial) })
}

// prepare adds the extra replica once and removes it again.
func (x *external) prepare(ctx context.Context) error {
	names, err := x.replicaNames(ctx)
	if err != nil {
		return err
	}
	x.initial = names
	if _, err := x.scale(ctx); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := x.stop(ctx, true); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

func (x *external) describe() map[string]any {
	return map[string]any{
		"router_url":      x.spec.RouterURL,
		"admin_url":       x.spec.AdminURL,
		"router_policy":   x.policy,
		"scale_cmd":       x.spec.ScaleCmd,
		"unscale_cmd":     x.spec.UnscaleCmd,
		"prepare":         x.spec.Prepare,
		"initial_replica": x.initial,
	}
}

// waitFor polls GET /replicas until ok holds for the name-sorted names.
func (x *external) waitFor(ctx context.Context, ok func([]string) bool) error {
	every := x.spec.PollInterval
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	for {
		names, err := x.replicaNames(ctx)
		if err != nil {
			return err
		}
		if ok(names) {
			return nil
		}
		if !sleep(ctx, every) {
			return ctx.Err()
		}
	}
}

// replicaNames returns the names of the (first) router's replicas, sorted.
func (x *external) replicaNames(ctx context.Context) ([]string, error) {
	return x.replicaNamesAt(ctx, x.spec.RouterURLs()[0])
}

// replicaNamesAt returns the names of the replicas of the router instance
// at base, sorted.
func (x *external) replicaNamesAt(ctx context.Context, base string) ([]string, error) {
	var info router.ReplicasInfo
	if err := x.callAt(ctx, base, http.MethodGet, "/replicas", nil, &info); err != nil {
		return nil, fmt.Errorf("router replicas: %w", err)
	}
	names := make([]string, len(info.Replicas))
	for i, r := range info.Replicas {
		names[i] = r.Name
	}
	slices.Sort(names)
	return names, nil
}

// callAt sends a request to the router instance (or admin API) at base and
// decodes its JSON answer into out.
func (x *external) callAt(ctx context.Context, base, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	admin := strings.HasPrefix(path, "/admin/")
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path, rd)
	if err != nil {
		return err
	}
	if admin && x.spec.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+x.spec.AdminToken)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := x.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(statusError(resp.StatusCode, b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: malformed answer: %v", method, path, err)
	}
	return nil
}

// exec runs a scale command.
func (x *external) exec(ctx context.Context, cmd string) error {
	if x.spec.exec != nil {
		return x.spec.exec(ctx, cmd)
	}
	return shell(ctx, cmd)
}

// shell runs cmd with sh -c (cmd /C on Windows); its output goes into the
// error when it fails.
func shell(ctx context.Context, cmd string) error {
	var c *exec.Cmd
	if runtime.GOOS == "windows" {
		c = exec.CommandContext(ctx, "cmd", "/C", cmd)
	} else {
		c = exec.CommandContext(ctx, "sh", "-c", cmd)
	}
	out, err := c.CombinedOutput()
	if err != nil {
		text := strings.TrimSpace(string(out))
		if len(text) > 1000 {
			text = text[len(text)-1000:]
		}
		return fmt.Errorf("command %q: %v: %s", cmd, err, text)
	}
	return nil
}
