# The two set-up commands of a fresh machine are `make run` and `make test` (README.md).
.PHONY: run test image tools crds manifests cluster-up cluster-down lint fuzz bench soak audit

run:            ## local control plane, CRDs, samples checked, then the operator in the foreground
	hack/run.sh

test:           ## fmt, clippy, unit tests, the image, then the e2e suite on the local control plane
	hack/test.sh

image:          ## the container image (Dockerfile) with podman, on local stand-ins of its bases: localhost/squall:dev
	hack/image.sh

tools:          ## build the control-plane binaries and helm into ~/.cache/squall
	hack/build-tools.sh

crds:           ## regenerate manifests/crds and the chart's CRD templates
	UPDATE_CRDS=1 cargo test --test crd_drift

manifests:      ## regenerate manifests/install.yaml from the chart
	UPDATE_MANIFESTS=1 cargo test -p e2e --test suite -- --include-ignored shared::chart::the_install_manifest_is_the_rendered_chart

cluster-up:
	e2e/cluster.sh up

cluster-down:
	e2e/cluster.sh down

lint:           ## squall lint on the bundled samples
	cargo run --quiet --bin squall -- lint -f manifests/samples/stormservice-canary.yaml -f manifests/samples/stormservice-pooled.yaml -f manifests/samples/stormservice-gang.yaml

audit:          ## cargo deny with the RustSec advisories (needs network access to GitHub)
	hack/deny.sh --advisories

fuzz:           ## fuzz the admission review handler and the analysis condition parser (FUZZ_SECONDS each, default 600)
	hack/fuzz.sh

bench:          ## every benchmark (admission, planner, cache scale, controller at 1,600 and 5,000 pods); regenerates the README table
	hack/bench.sh

soak:           ## the fault tests three times in a row (not in CI)
	hack/soak.sh
