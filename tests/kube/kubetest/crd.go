package kubetest

import (
	"os"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// CRD creates the CustomResourceDefinition in the YAML file at path and
// waits until discovery serves its resource in groupVersion.
func (c *Cluster) CRD(t testing.TB, path, groupVersion, resource string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read CRD: %v", err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatalf("decode CRD %s: %v", path, err)
	}
	if _, err := c.crds(t).Create(Ctx(t), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD %s: %v", path, err)
	}
	c.waitServed(t, "CRD "+path, groupVersion, resource, true)
}

// RemoveCRD deletes the CRD name and waits until discovery of
// groupVersion no longer serves resource.
func (c *Cluster) RemoveCRD(t testing.TB, name, groupVersion, resource string) {
	t.Helper()
	if err := c.crds(t).Delete(Ctx(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete CRD %s: %v", name, err)
	}
	c.waitServed(t, "CRD "+name, groupVersion, resource, false)
}

// crds is the admin's client of CustomResourceDefinitions.
func (c *Cluster) crds(t testing.TB) dynamic.ResourceInterface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
}

// waitServed waits, a minute at most, until discovery of groupVersion
// serves resource (want) or no longer does; a discovery error other than
// the group version's 404 is waited out either way.
func (c *Cluster) waitServed(t testing.TB, what, groupVersion, resource string, want bool) {
	t.Helper()
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		list, err := disc.ServerResourcesForGroupVersion(groupVersion)
		served := err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource })
		if served == want && (err == nil || apierrors.IsNotFound(err)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s/%s served %v, want %v, a minute on: %v", what, groupVersion, resource, served, want, err)
		}
	}
}
