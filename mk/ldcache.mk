# internal/ldcache: its tests build ELF libraries with gcc and check the
# caches it writes against glibc's own ldconfig and dynamic loader; unshare
# keeps ldconfig's runs over the host's folders off the host's aux cache.
TEST_DEPS += ldcache-deps

.PHONY: ldcache-deps
ldcache-deps:
	@if ! { command -v ldconfig && command -v unshare && command -v chroot && \
		echo 'int main(void){return 0;}' | gcc -x c - -o /dev/null; } >/dev/null 2>&1; then \
		echo "installing gcc libc6-dev libc-bin util-linux coreutils"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev libc-bin util-linux coreutils >/dev/null; \
	fi
