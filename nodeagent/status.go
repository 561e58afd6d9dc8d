package nodeagent

import (
	"fmt"
	"slices"
	"strings"
)

// Status is what the agent's last sync left on the node, for a reporter
// (kubenode's Node condition). The agent hands it to Options.Status
// whenever it changes.
type Status struct {
	// Configured: a model loaded at least once.
	Configured bool
	// CNIWritten: the conflist is in place (the node can turn Ready).
	CNIWritten bool
	// Routes is the number of the agent's routes installed; -1 leaves
	// the count out of String.
	Routes int
	// Errors are the stages whose last attempt failed, in stage order
	// (state, catalog, cni, routes, snat, bridge-netfilter, forward), each with
	// its error.
	Errors []StageError
}

// StageError is one failed stage.
type StageError struct {
	Stage, Err string
}

// OK reports whether the node is fully configured: a model, the CNI
// config written and no stage failing.
func (s Status) OK() bool { return s.Configured && s.CNIWritten && len(s.Errors) == 0 }

// String is a one-line summary: what is in place, then each failure.
func (s Status) String() string {
	var parts []string
	if s.CNIWritten {
		parts = append(parts, "CNI config written")
	} else {
		parts = append(parts, "CNI config not written")
	}
	if s.Routes >= 0 {
		parts = append(parts, fmt.Sprintf("%d routes installed", s.Routes))
	}
	for _, e := range s.Errors {
		parts = append(parts, e.Stage+": "+e.Err)
	}
	return strings.Join(parts, "; ")
}

func (s Status) equal(o Status) bool {
	return s.Configured == o.Configured && s.CNIWritten == o.CNIWritten && s.Routes == o.Routes && slices.Equal(s.Errors, o.Errors)
}

// status composes the current Status. Run's goroutine only.
func (a *Agent) status() Status {
	st := Status{Configured: a.cur != nil, CNIWritten: a.cniWritten, Routes: a.routes}
	for _, stage := range stages {
		if err, ok := a.errs[stage]; ok {
			st.Errors = append(st.Errors, StageError{Stage: stage, Err: err})
		}
	}
	return st
}

// publish hands the status to Options.Status when it changed since the
// last call. Run's goroutine only.
func (a *Agent) publish() {
	if a.o.Status == nil {
		return
	}
	st := a.status()
	if a.published != nil && a.published.equal(st) {
		return
	}
	a.published = &st
	a.o.Status(st)
}
