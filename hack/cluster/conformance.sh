#!/usr/bin/env bash
# Runs the upstream e2e suite (e2e.test and ginkgo from the cluster's own
# k8s.io/kubernetes release, hack/cluster/build.sh DIR conformance)
# against the cluster of `make cluster`, and summarises its JUnit report.
#
# usage: conformance.sh STATE_DIR REPORT_DIR
#   FOCUS  the specs (default: the sig-network conformance tests)
#   SKIP   specs left out (default: none)
#   NODES  ginkgo's parallel processes (default 4: the tests mostly wait)
#
# Writes REPORT_DIR/junit_01.xml (the suite's own report), REPORT_DIR/log,
# REPORT_DIR/summary.txt (counts, wall time, each failed spec) and
# REPORT_DIR/junit-ran.xml (the report without the skipped specs and the
# captured output, a failure's message cut to its first 20 lines: what
# docs/conformance commits), and exits 1 when a spec failed.
set -euo pipefail
state=$(cd "${1:?usage: conformance.sh STATE_DIR REPORT_DIR}" && pwd)
report=${2:?usage: conformance.sh STATE_DIR REPORT_DIR}
bin=${CLUSTER_BIN:-$HOME/.cache/bridgehead/cluster/bin}
focus=${FOCUS:-'\[sig-network\].*\[Conformance\]'}
skip=${SKIP:-}
nodes=${NODES:-4}
mkdir -p "$report"
report=$(cd "$report" && pwd)
rm -f "$report"/junit_*.xml
args=(--nodes="$nodes" --focus="$focus" --no-color --timeout=3h)
[ -z "$skip" ] || args+=(--skip="$skip")
# The suite skips the specs that need several nodes unless told how many
# there are (--num-nodes; 16 sig-network specs).
cluster_nodes=$("$bin/kubectl" --kubeconfig "$state/kubeconfig" get nodes -o name | wc -l)
start=$(date +%s)
# Where the suite's pods ran: every pod scheduled meanwhile, with its node.
"$bin/kubectl" --kubeconfig "$state/kubeconfig" get pods -A -w --no-headers \
	-o custom-columns=NS:.metadata.namespace,NAME:.metadata.name,NODE:.spec.nodeName >"$report/pods" 2>/dev/null &
watcher=$!
rc=0
(cd "$report" && PATH=$bin:$PATH "$bin/ginkgo" "${args[@]}" "$bin/e2e.test" -- \
	--kubeconfig="$state/kubeconfig" --provider=local --num-nodes="$cluster_nodes" --disable-log-dump --report-dir="$report") >"$report/log" 2>&1 || rc=$?
secs=$(($(date +%s) - start))
kill "$watcher" 2>/dev/null || true
wait "$watcher" 2>/dev/null || true
python3 - "$report/junit_01.xml" "$secs" "$focus" "$skip" "$report/pods" >"$report/summary.txt" <<'PY'
import sys, xml.etree.ElementTree as ET
path, secs, focus, skip, pods = sys.argv[1:6]
cases = ET.parse(path).getroot().iter("testcase")
ran = passed = 0
failed = []
for c in cases:
    # Suite setup and reports ([SynchronizedBeforeSuite], [ReportAfterSuite], ...) are not specs.
    if c.find("skipped") is not None or c.get("name", "").startswith("[Report") or c.get("name", "").startswith("[Synchronized"):
        continue
    ran += 1
    if c.find("failure") is not None or c.find("error") is not None:
        failed.append(c.get("name"))
    else:
        passed += 1
print(f"focus: {focus}")
if skip:
    print(f"skip: {skip}")
print(f"ran {ran} specs: {passed} passed, {len(failed)} failed; wall time {secs} s")
for name in failed:
    print(f"FAILED: {name}")
# The suite's pods (not those of kube-system or bridgehead), by node.
nodes = {}
for line in open(pods):
    f = line.split()
    if len(f) == 3 and f[2] != "<none>" and f[0] not in ("kube-system", "bridgehead-system"):
        nodes.setdefault(f[2], set()).add((f[0], f[1]))
print("the suite's pods by node: " + ", ".join(f"{n} {len(p)}" for n, p in sorted(nodes.items())))
PY
python3 - "$report/junit_01.xml" "$report/junit-ran.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
tree = ET.parse(sys.argv[1])
for suite in tree.getroot().iter("testsuite"):
    for c in list(suite.findall("testcase")):
        if c.find("skipped") is not None:
            suite.remove(c)
            continue
        for ch in list(c):
            if ch.tag in ("system-out", "system-err"):
                c.remove(ch)
            elif ch.text:
                ch.text = "\n".join(ch.text.splitlines()[:20]) + "\n"
ET.indent(tree)
tree.write(sys.argv[2], encoding="unicode")
PY
cat "$report/summary.txt"
exit $rc
