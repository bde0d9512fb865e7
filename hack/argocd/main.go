// argocd-health: Argo CD's own health assessment of a resource, as
// `argocd admin settings resource-overrides health RESOURCE --argocd-cm-path CM` runs it,
// without the rest of the argocd CLI (server, UI assets, gRPC clients) to build.
//
// The call path is the CLI's, line for line (cmd/argocd/commands/admin/settings.go in
// github.com/argoproj/argo-cd/v3): the argocd-cm ConfigMap read from a file and labelled as
// Argo CD labels it, a SettingsManager over a fake clientset holding it (and the default
// argocd-secret), GetResourceOverrides (which parses the resource.customizations.health.<group_kind>
// keys), then gitops-engine's health.GetResourceHealth with lua.ResourceHealthOverrides: the
// same gopher-lua state, library set and 1 s timeout the application controller uses.
//
// Usage: argocd-health --argocd-cm-path argocd-cm.yaml RESOURCE.yaml... ; one JSON line per
// resource: {"resource": path, "status": "...", "message": "..."} as Argo CD would show it,
// {"configured": false} when neither a script nor a built-in check applies, and "error" too when
// the script failed (Argo CD then shows Unknown with the error as the message).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	healthutil "github.com/argoproj/argo-cd/gitops-engine/pkg/health"
	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/argoproj/argo-cd/v3/common"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
)

type result struct {
	Resource   string `json:"resource"`
	Configured *bool  `json:"configured,omitempty"`
	Status     string `json:"status,omitempty"`
	Message    string `json:"message,omitempty"`
	Error      string `json:"error,omitempty"`
}

// setSettingsMeta is the CLI's: the SettingsManager only sees objects labelled part-of argocd.
func setSettingsMeta(obj metav1.Object) {
	obj.SetNamespace("default")
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["app.kubernetes.io/part-of"] = "argocd"
	obj.SetLabels(labels)
}

func main() {
	cmPath := flag.String("argocd-cm-path", "", "path to the argocd-cm ConfigMap (YAML)")
	flag.Parse()
	if *cmPath == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: argocd-health --argocd-cm-path argocd-cm.yaml RESOURCE.yaml...")
		os.Exit(2)
	}
	log.SetOutput(io.Discard) // the SettingsManager's informational logs are not results

	data, err := os.ReadFile(*cmPath)
	check(err)
	var cm *corev1.ConfigMap
	check(yaml.Unmarshal(data, &cm))
	if cm == nil || cm.Kind != "ConfigMap" {
		check(fmt.Errorf("%s: not a ConfigMap", *cmPath))
	}
	setSettingsMeta(cm)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: common.ArgoCDSecretName},
		Data:       map[string][]byte{"admin.password": []byte("test"), "server.secretkey": []byte("test")},
	}
	setSettingsMeta(secret)
	ctx := context.Background()
	manager := settings.NewSettingsManager(ctx, fake.NewClientset(secret, cm), "default")
	overrides, err := manager.GetResourceOverrides()
	check(err)

	out := json.NewEncoder(os.Stdout)
	for _, path := range flag.Args() {
		data, err := os.ReadFile(path)
		check(err)
		res := unstructured.Unstructured{}
		check(yaml.Unmarshal(data, &res))
		r := result{Resource: path}
		health, err := healthutil.GetResourceHealth(&res, lua.ResourceHealthOverrides(overrides))
		if err != nil {
			r.Error = err.Error()
		}
		if health == nil {
			no := false
			r.Configured = &no
		} else {
			r.Status, r.Message = string(health.Status), health.Message
		}
		check(out.Encode(r))
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
		os.Exit(1)
	}
}
