//go:build tools

// Package tools pins the promtool command the tests build (`promtool check rules` and
// `promtool test rules` on the shipped PrometheusRule).
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
