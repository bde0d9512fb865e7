//go:build tools

// Package tools pins the helm command the tests build (a real Helm against the test control plane).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
