package pool

import "slices"

// Resolve maps a request's model name (and its conversation hash, for
// splits) to a pool:
//
//	""      -> cfg.Default if set (then as a named model); else the
//	           catch-all pool if it has replicas; else the only pool if
//	           exactly one has replicas; else *UnknownModelError{Model: ""}
//	alias   -> its model; then a rewrite's target chosen by hash(conv,
//	           From) over the weights (the same conversation always gets
//	           the same target);
//	adapter -> its base model's pool, Route.Adapter = the adapter name;
//	model   -> its pool; a name without a tag, the pool of NAME:latest
//	           (ImplicitTag, Ollama's names); no such pool with replicas:
//	           the catch-all pool if it has replicas (Route.Model = the
//	           name as asked, after alias and rewrite), else
//	           *UnknownModelError listing the served models.
//
// When no pool has any replica at all (before discovery's first answer, or
// every replica gone), every request resolves to the empty catch-all pool:
// its Table.Route answers state.ErrNoReplica (a 503, as before pools), not
// an unknown model. Resolve does not allocate unless it fails.
func (s *Set) Resolve(model string, conv uint64) (Route, error) {
	sn := s.snap.Load()
	rt := Route{Requested: model}
	name := model
	if name == "" {
		if s.cfg.Default == "" {
			switch {
			case sn.catchAll || sn.none:
				rt.Pool = s.catchAll
				return rt, nil
			case sn.only != nil:
				rt.Pool, rt.Model, rt.Rewritten = sn.only, sn.only.model, true
				return rt, nil
			}
			return Route{}, &UnknownModelError{Served: slices.Clone(sn.names)}
		}
		name = s.cfg.Default
	}
	if m, ok := s.cfg.Aliases[name]; ok {
		name = m
	}
	if rw, ok := s.rewrites[name]; ok {
		name = rw.pick(conv)
	}
	rt.Model, rt.Rewritten = name, name != model
	if p, ok := sn.served[name]; ok {
		rt.Pool = p
		return rt, nil
	}
	if ad, ok := sn.adapters[name]; ok {
		rt.Adapter = ad.name
		if p, ok := sn.served[ad.base]; ok {
			rt.Pool = p
			return rt, nil
		}
	}
	if p, ok := sn.untagged[name]; ok {
		rt.Pool = p // Ollama's implicit ":latest" (ImplicitTag)
		return rt, nil
	}
	if sn.catchAll || sn.none {
		rt.Pool = s.catchAll
		return rt, nil
	}
	asked := model
	if asked == "" {
		asked = s.cfg.Default
	}
	return Route{}, &UnknownModelError{Model: asked, Served: slices.Clone(sn.names)}
}
