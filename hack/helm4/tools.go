//go:build tools

// Package tools pins the helm 4 command the tests build (a real Helm 4 against the test control plane).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
