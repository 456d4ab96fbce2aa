package kubeapi

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig finds credentials: the kubeconfig file when named, else the
// pod's service account.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %q: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("find credentials: --kubeconfig not given and not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset)")
	}
	if err != nil {
		return nil, fmt.Errorf("load in-cluster config: %w", err)
	}
	return c, nil
}
