// Package report is the cluster-wide view of RHEL 10 readiness: it reads
// findings from any mix of findings files, a live cluster's Reports (its
// Events where a namespace has none) and a saved `kubectl get events -A -o json`, groups them by
// owning workload, marks what an expectations file says is expected, and
// renders a table, Markdown, JSON, JUnit XML or a self-contained HTML page
// with a verdict for CI. A cluster is read through the sources SourcesOf
// picks (source.go), the first it holds; a list refused is a ForbiddenError
// naming the permission, never a fallback; Origin is the header naming
// cluster, time and inputs.
//
// Read owns the input order (findings files, saved Events, then the
// cluster, which Inputs.Connect reaches only when needed) and gives the
// judged Report; the command wires flags into Inputs and writes the Report
// with Write, whose formats are a literal table (render.go), one file per
// writer.
//
// Data flows one way: inputs give Items (one per finding, with its state),
// Settle keeps what they still say of each pod (gone takes the pod's earlier
// usage away; usage seen beats an unknown look), Group folds Items into
// Groups (one per namespace, owner and state: a workload's pods whose
// inspection could not finish are a row of their own, status error), Verdict judges Groups by
// the --fail-on mode, and the writers render them. Everything read is
// treated as hostile text: lines and Events are bounded, and every writer
// escapes what it prints for its format.
package report
