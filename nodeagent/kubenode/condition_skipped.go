package kubenode

// The node agent says in its Node condition (BridgeheadNodeNetwork) when
// it skipped entries of the catalog that concern only other nodes or
// other sites (Source, nodeagent.CheckCatalog): a warning in the message,
// "warning: N catalog entries skipped (...), first FIELD: PROBLEM".
// The condition stays True: everything this node installs is in place.
// The text changes only when the set of bad entries does, never with a
// join (a condition rewritten on each join would be a write per Node).

// SkippedPrefix starts the warning's part of the message.
const SkippedPrefix = "warning: "

// ReportSkipped hands over the summary of the catalog entries skipped,
// "" for none (Options.Skipped); the condition is rewritten with it. Any
// goroutine; never blocks.
func (r *ConditionReporter) ReportSkipped(summary string) {
	r.set(func() { r.skipped = summary })
}

// message is a condition's message: msg, then the summary of skipped
// entries and the network policy state, each when set. A long msg is cut
// to keep within maxMessage, never the parts after it (nodeagent.Skipped
// bounds the summary).
func message(msg, skipped, policy string) string {
	var tail string
	if skipped != "" {
		tail += "; " + SkippedPrefix + skipped
	}
	if policy != "" {
		tail += "; " + NetworkPolicyPrefix + policy
	}
	if len(msg)+len(tail) > maxMessage {
		msg = msg[:max(maxMessage-len(tail)-3, 0)] + "..."
	}
	return msg + tail
}
