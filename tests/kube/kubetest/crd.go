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
	dyn, err := dynamic.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(gvr).Create(Ctx(t), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD %s: %v", path, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		list, err := disc.ServerResourcesForGroupVersion(groupVersion)
		if err == nil {
			for _, r := range list.APIResources {
				if r.Name == resource {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s: %s/%s not served after a minute: %v", path, groupVersion, resource, err)
		}
	}
}

// RemoveCRD deletes the CRD name and waits until discovery of
// groupVersion no longer serves resource.
func (c *Cluster) RemoveCRD(t testing.TB, name, groupVersion, resource string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if err := dyn.Resource(gvr).Delete(Ctx(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete CRD %s: %v", name, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		list, err := disc.ServerResourcesForGroupVersion(groupVersion)
		if apierrors.IsNotFound(err) || err == nil && !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s still served a minute after its deletion", name)
		}
	}
}
