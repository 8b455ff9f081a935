# The smoke test on a bare GPU machine (tests/gpu): a static runc travels
# with gpuctk's binaries, since such a machine has no container engine and
# nothing to fetch. runc's module replaces opencontainers/selinux with a
# folder its zip lacks, so the replace goes and the module resolves its
# requirements itself; no seccomp (libseccomp has no static build here).
RUNC_STATIC_VERSION := v1.2.8
TEST_DEPS += $(TOOLS)/runc-static

$(TOOLS)/runc-static:
	@mkdir -p $(TOOLS)
	tmp=$$(mktemp -d) && trap 'chmod -R u+w "$$tmp"; rm -rf "$$tmp"' EXIT && \
	dir=$$(GOFLAGS=-mod=mod $(GO) mod download -json github.com/opencontainers/runc@$(RUNC_STATIC_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
	cp -r "$$dir" "$$tmp/runc" && chmod -R u+w "$$tmp/runc" && \
	sed -i '/^replace github.com\/opencontainers\/selinux/d' "$$tmp/runc/go.mod" && rm -rf "$$tmp/runc/vendor" && \
	cd "$$tmp/runc" && CGO_ENABLED=1 GOFLAGS=-mod=mod $(GO) build -trimpath -tags "netgo osusergo" \
		-ldflags '-s -w -extldflags "-static"' -o $@.tmp . && mv $@.tmp $@

# gpu-pack: what tests/gpu/smoke.sh needs on a bare GPU machine, in
# GPU_PACK (an ignored folder of the checkout, which travels with it).
GPU_PACK ?= .dev/gpu
.PHONY: gpu-pack
gpu-pack: $(TOOLS)/runc-static
	RUNC=$(TOOLS)/runc-static tests/gpu/pack.sh $(GPU_PACK)
