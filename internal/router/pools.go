package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/llm-ring/llm-ring/internal/cluster"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// Pools by model (issue 23). The router holds a pool.Set: one routing
// table per model served (its ring, loads, placement memory, prefix index
// and policy), the replicas grouped by the models they list. A request's
// model (the body's "model"; the llama.cpp /completion names none) picks
// its pool (Set.Resolve: aliases, the default model, rewrites split per
// conversation, adapters to their base model's pool); routing, release and
// learning then happen in that pool's table exactly as they happened in the
// one table before pools. With no models configured and no model lists
// discovered, every replica is in the catch-all pool "" and every request
// goes there, body untouched: the router behaves as it always did, and
// Router.Table is that pool's table.

// newTable builds a pool's routing table: the configuration's policy and
// state settings for the model (poolTable), connected to the cluster's
// gossip for that model when the router is in a cluster.
func (r *Router) newTable(model string) (*state.Table, error) {
	t, err := r.poolTable(model)
	if err != nil {
		return nil, err
	}
	if err := r.withAdminPolicy(model, t); err != nil {
		return nil, err
	}
	if r.node != nil {
		t.SetPeers(cluster.TablePeers{Node: r.node, Model: model})
	}
	return t, nil
}

// table is the routing table of the flight's pool.
func (f *flight) table() *state.Table { return f.pool.Table() }

// resolve picks the flight's pool from the model the request names (and
// its conversation, for a rewrite's split), sets the adapter it asks for,
// and rewrites the body's "model" when an alias, the default or a rewrite
// changed it. An unknown model is a *pool.UnknownModelError (a 404).
func (r *Router) resolve(f *flight, model string) error {
	rt, err := r.pools.Resolve(model, f.in.Hash)
	if err != nil {
		return err
	}
	f.pool, f.model, f.in.Adapter = rt.Pool, rt.Model, rt.Adapter
	if !rt.Rewritten || rt.Model == "" || f.kind == kindCompletion {
		return nil // the llama.cpp /completion names no model: nothing to rewrite
	}
	body, err := setModel(f.body, rt.Model)
	if err != nil {
		if f.kind == kindByLoad {
			return nil // not an object: the replica judges the body as it came
		}
		return badRequest("%v", err)
	}
	f.body = body
	return nil
}

// writeModelNotFound answers a request for a model no pool serves: 404 in
// OpenAI's shape, the message listing the models served.
func (r *Router) writeModelNotFound(w http.ResponseWriter, e *pool.UnknownModelError) {
	r.metrics.rejected.WithLabelValues(statusLabel(http.StatusNotFound)).Inc()
	writeJSON(w, http.StatusNotFound, modelNotFound{Error: modelNotFoundDetail{
		Message: modelNotFoundText(e), Type: wire.ErrTypeInvalidRequest, Param: "model", Code: "model_not_found"}})
}

func modelNotFoundText(e *pool.UnknownModelError) string {
	served := "none"
	if len(e.Served) > 0 {
		served = strings.Join(e.Served, ", ")
	}
	if e.Model == "" {
		return "the request names no model and no default model is configured; models served: " + served
	}
	return "the model `" + clip(e.Model, 256) + "` does not exist; models served: " + served
}

// unknownModel returns err's *pool.UnknownModelError, or nil.
func unknownModel(err error) *pool.UnknownModelError {
	var e *pool.UnknownModelError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// replicaRow is one replica as the operator sees it across the pools that
// hold it: its row in the first of them (its health, reports and ring
// share there), its loads summed over all of them (each pool charges only
// its own requests), and the pools it is a member of.
type replicaRow struct {
	state.ReplicaStatus
	Peer  policy.Load
	Pools []string
}

// poolsView is every pool's status, and the replicas merged by name.
type poolsView struct {
	Policy   string // the catch-all pool's: the configured policy
	Memory   int    // conversations in placement memory, all pools
	Replicas []replicaRow
	Pools    []PoolInfo
}

// PoolInfo is one pool of GET /replicas and the status page.
type PoolInfo struct {
	Model            string `json:"model"` // "" the catch-all pool (replicas with no model list)
	Label            string `json:"label"` // its metric label (models beyond the bound share "other")
	Policy           string `json:"policy"`
	Replicas         int    `json:"replicas"`
	Healthy          int    `json:"healthy"`
	PlacementEntries int    `json:"placement_entries"`
}

// view merges the pools' status (the catch-all pool's first).
func (r *Router) view() poolsView {
	var v poolsView
	at := map[string]int{}
	for _, p := range r.pools.Pools() {
		st := p.Table().Status()
		peer := p.Table().PeerLoad()
		if p.Model() == "" {
			v.Policy = st.Policy
		}
		v.Memory += st.Memory
		v.Pools = append(v.Pools, PoolInfo{Model: p.Model(), Label: p.Label(), Policy: st.Policy,
			Replicas: len(st.Replicas), Healthy: st.Healthy(), PlacementEntries: st.Memory})
		for i, x := range st.Replicas {
			var pl policy.Load
			if i < len(peer) {
				pl = peer[i]
			}
			j, ok := at[x.Name]
			if !ok {
				at[x.Name] = len(v.Replicas)
				v.Replicas = append(v.Replicas, replicaRow{ReplicaStatus: x, Peer: pl, Pools: []string{p.Model()}})
				continue
			}
			row := &v.Replicas[j]
			row.Load.Requests += x.Load.Requests
			row.Load.Tokens += x.Load.Tokens
			row.Peer = pl // peers' loads are per replica, whatever the pool
			row.Pools = append(row.Pools, p.Model())
		}
	}
	slices.SortFunc(v.Replicas, func(a, b replicaRow) int { return strings.Compare(a.Name, b.Name) })
	return v
}

// replicaModels lists a replica's models as /replicas shows them: names,
// an adapter as "adapter (base)"; nil when unknown (it serves anything).
func replicaModels(ms []replicaset.Model) []string {
	if ms == nil {
		return nil
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		if m.Parent != "" {
			out = append(out, m.Name+" ("+m.Parent+")")
			continue
		}
		out = append(out, m.Name)
	}
	return out
}

// poolModels completes the merged GET /v1/models answer with the pools
// (issue 23): every model the router routes by name gets "replicas", the
// size of its pool (an adapter: the replicas listing it), and "parent" for
// an adapter; a model a pool serves that no replica's list showed gets a
// card of its own; a card no pool would route (no pool of that name, and
// no replica in the catch-all pool to take it) is left out.
func (r *Router) poolModels(merged []byte) ([]byte, error) {
	var in struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(merged, &in); err != nil {
		return nil, err
	}
	byID := map[string]map[string]json.RawMessage{}
	for _, card := range in.Data {
		var id string
		if json.Unmarshal(card["id"], &id) == nil && id != "" {
			byID[id] = card
		}
	}
	catchAll := r.pools.Pool("").Replicas() > 0
	var out []map[string]json.RawMessage
	for _, m := range r.pools.Models() {
		card := byID[m.ID]
		if card == nil {
			card = map[string]json.RawMessage{"id": jsonString(m.ID), "object": jsonString("model"),
				"created": json.RawMessage("0"), "owned_by": jsonString("llm-ring")}
		}
		delete(byID, m.ID)
		if _, ok := card["parent"]; !ok && m.Parent != "" {
			card["parent"] = jsonString(m.Parent)
		}
		card["replicas"] = json.RawMessage(strconv.Itoa(m.Replicas))
		out = append(out, card)
	}
	if catchAll {
		for _, card := range byID {
			out = append(out, card)
		}
	}
	id := func(c map[string]json.RawMessage) string { var s string; json.Unmarshal(c["id"], &s); return s }
	slices.SortFunc(out, func(a, b map[string]json.RawMessage) int { return strings.Compare(id(a), id(b)) })
	return json.Marshal(struct {
		Object string                       `json:"object"`
		Data   []map[string]json.RawMessage `json:"data"`
	}{"list", out})
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
