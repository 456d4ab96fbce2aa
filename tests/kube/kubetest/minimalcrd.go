package kubetest

import (
	"fmt"
	"strings"
)

// MinimalCRD is a CustomResourceDefinition that serves kind at v1 in group
// and accepts any object: enough for an apply of our objects of a kind
// whose operator the test API server does not run (Prometheus Operator's
// ServiceMonitor, OpenShift's SCC), no network needed.
func MinimalCRD(group, scope, kind, plural string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[4]s.%[1]s
spec:
  group: %[1]s
  scope: %[2]s
  names: {plural: %[4]s, singular: %[5]s, kind: %[3]s, listKind: %[3]sList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`, group, scope, kind, plural, strings.ToLower(kind))
}
