// Command registry is CNCF distribution's `registry` (its root command: `registry serve CONFIG`)
// with the filesystem storage driver only, for the release tests (tests/e2e/test_release.py):
// an OCI registry on loopback that `helm push`, skopeo and buildah reach over plain HTTP. The
// upstream cmd/registry also links the S3, Azure and GCS drivers and their SDKs, which the tests
// never use and which are a third of its cold build (measured: 692 s against 440 s, same machine).
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
