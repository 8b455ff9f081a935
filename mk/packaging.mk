# Packaging: `make packages` writes dist/gpuctk_<version>_<arch>.deb and
# dist/gpuctk-<version>-1.<arch>.rpm with nfpm (nfpm.yaml), the binaries
# stamped with the package version. The packaging tests need nfpm, rpm
# and lintian: TEST_DEPS installs them when missing.

NFPM_VERSION := v2.45.2
NFPM         := $(TOOLS)/nfpm
DIST         ?= dist
PKG_BIN       = $(DIST)/bin
# A valid deb and rpm version from the latest vX.Y.Z tag: v1.2.3 -> 1.2.3,
# 4 commits later -> 1.2.3+4.g<sha> (after 1.2.3 for both), v1.2.3-rc1 ->
# 1.2.3-rc1 (nfpm makes it 1.2.3~rc1, before 1.2.3); 0.0.0 without a tag.
PKG_VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' 2>/dev/null | sed -E 's/^v//; s/-([0-9]+)-g([0-9a-f]+)$$/+\1.g\2/' | grep . || echo 0.0.0)

TEST_DEPS += $(NFPM) packaging-tools

.PHONY: packages packaging-tools

packages: $(NFPM)
	@echo "$(PKG_VERSION)" | grep -Eq '^[0-9]+(\.[0-9]+)*([-+~][0-9A-Za-z.~+-]*)?$$' || { echo "PKG_VERSION $(PKG_VERSION) is not a valid package version: use digits and dots, e.g. 1.2.3"; exit 1; }
	$(MAKE) --no-print-directory build VERSION=$(PKG_VERSION) BIN=$(PKG_BIN)
	@{ printf 'gpuctk (%s-1) unstable; urgency=medium\n\n  * Built by make packages from git %s.\n\n' \
		"$$(echo $(PKG_VERSION) | sed 's/-/~/')" "$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; \
	  printf ' -- %s  %s\n' "$$(sed -n 's/^maintainer: //p' nfpm.yaml)" "$$(git log -1 --format=%cD 2>/dev/null || date -R)"; \
	} | gzip -9n > $(PKG_BIN)/changelog.Debian.gz
	for m in $(PKG_BIN)/gpuctk.8 $(PKG_BIN)/gpuctk-device-plugin.8 packaging/man/gpuctk-hook.8 packaging/man/gpuctk-runtime.8; do \
		gzip -9n < $$m > $(PKG_BIN)/$$(basename $$m).gz || exit 1; \
	done
	@glibc=$$(objdump -T $(PKG_BIN)/gpuctk | grep -o 'GLIBC_[0-9.]*' | sed 's/^GLIBC_//' | sort -Vu | tail -n 1); \
	for p in deb rpm; do \
		GPUCTK_VERSION=$(PKG_VERSION) GPUCTK_BIN=$(PKG_BIN) GPUCTK_ARCH=$$($(GO) env GOARCH) GPUCTK_GLIBC=$$glibc \
			$(NFPM) package --config nfpm.yaml --packager $$p --target $(DIST)/ || exit 1; \
	done

# Installed only when missing: the version is pinned because later ones
# need modules the module proxy refuses.
$(NFPM):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

packaging-tools:
	@need=""; \
	command -v rpm >/dev/null || need="$$need rpm"; \
	command -v lintian >/dev/null || need="$$need lintian"; \
	command -v dpkg-deb >/dev/null || need="$$need dpkg"; \
	command -v objdump >/dev/null || need="$$need binutils"; \
	command -v systemd-analyze >/dev/null || need="$$need systemd"; \
	if [ -n "$$need" ]; then \
		echo "installing$$need"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$need >/dev/null; \
	fi
