package nodeagent

import (
	"errors"
	"os"
)

// Adoption: how Run uses the host state (state.go). Run's goroutine
// owns all of it.

// readPrev reads the host state an earlier agent left, once, before
// the first sync; the first sync logs what it adopted from it.
func (a *Agent) readPrev() {
	if a.o.StateFile == "" {
		a.adopted = true
		return
	}
	st, err := readState(a.o.StateFile, a.o.CNIConfDir)
	switch {
	case errors.Is(err, errNewerState):
		// stateKnown reports it at every sync.
	case err != nil:
		a.o.Log.Warn("node state file unreadable: adopting the node as an agent before versioned state left it, and replacing the file",
			"file", a.o.StateFile, "err", err)
		st = schema1(a.o.CNIConfDir)
	}
	a.prev = st
}

// stateKnown reads the state file again and reports whether this agent
// may change the node: not while a newer agent's file is there (a
// rollback), which it reports as stage "state".
func (a *Agent) stateKnown() bool {
	if a.o.StateFile == "" {
		return true
	}
	_, err := readState(a.o.StateFile, a.o.CNIConfDir)
	if errors.Is(err, errNewerState) {
		a.fail(stageState, errors.New(err.Error()+": leaving the node's routes, nftables tables and CNI config as that agent left them; run that version again, or remove "+a.o.StateFile+" to let this one take over"))
		// The newer agent's CNI config is what the runtime uses.
		_, serr := os.Stat(ownedBy(a.o.CNIConfDir).CNIConfig)
		a.cniWritten = serr == nil
		return false
	}
	a.ok(stageState)
	return true
}

// saveState records the node's state after a sync whose stages that own
// something (cni, routes, snat) all succeeded, and after the first one
// logs what it adopted. ch, cniWrote and snatWrote are that sync's
// changes.
func (a *Agent) saveState(ch RouteChange, cniWrote, snatWrote bool) {
	for _, stage := range []string{stageCNI, stageRoutes, stageSNAT} {
		if _, failed := a.errs[stage]; failed {
			return
		}
	}
	if !a.adopted {
		a.adopted = true
		kept := a.routes - ch.Added
		log := a.o.Log.Info
		msg := "adopted the node as the previous agent left it: nothing flushed, only differences changed"
		switch {
		case kept == 0 && cniWrote && snatWrote:
			msg = "configured the node: no earlier agent's routes, table or CNI config to adopt"
		case ch.Changed() || cniWrote || snatWrote:
			msg = "adopted the node from the previous agent and changed what differed from the model"
		}
		log(msg, "from_schema", a.prev.Schema, "from_agent", a.prev.Agent, "routes_kept", kept,
			"routes_added", ch.Added, "routes_replaced", ch.Replaced, "routes_deleted", ch.Deleted,
			"snat_table_rewritten", snatWrote, "cni_config_rewritten", cniWrote)
	}
	if a.o.StateFile == "" {
		return
	}
	st := HostState{Schema: StateSchema, Agent: a.o.Version, Node: a.cur.Node, Owned: ownedBy(a.o.CNIConfDir), Model: modelFingerprint(a.cur)}
	wrote, err := writeState(a.o.StateFile, st)
	if err != nil {
		a.fail(stageState, err)
		return
	}
	if wrote && a.prev.Schema != 0 && a.prev.Schema < StateSchema {
		a.o.Log.Info("node state migrated", "file", a.o.StateFile, "from_schema", a.prev.Schema, "to_schema", StateSchema)
		a.prev.Schema = StateSchema
	}
}
