/* probe [MiB]...: what a container's CUDA context is allowed. Prints the
   device's name, its SM count and total memory as the context sees them
   (under MPS, the SMs of the client's active thread percentage), then
   tries one cuMemAlloc of each size given and prints CUDA's result for
   each (0 when granted; 2, out of memory, beyond an MPS pinned-memory
   limit). libcuda is loaded with dlopen, as in vadd.c.

   Output, one line each: "probe: sms=N total_mib=M name=..." and
   "probe: alloc MIB -> RESULT". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*fn)();
static void *cuda;

static fn sym(const char *name) {
	fn f = (fn)dlsym(cuda, name);
	if (!f) { fprintf(stderr, "probe: %s not in libcuda.so.1\n", name); exit(1); }
	return f;
}

int main(int argc, char **argv) {
	enum { SM_COUNT = 16 }; /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
	int dev, sms = 0, r;
	void *ctx;
	char name[128] = "";
	size_t total = 0;
	cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) { fprintf(stderr, "probe: %s\n", dlerror()); return 1; }
	if ((r = sym("cuInit")(0))) { fprintf(stderr, "probe: cuInit: error %d\n", r); return 1; }
	if ((r = sym("cuDeviceGet")(&dev, 0))) { fprintf(stderr, "probe: cuDeviceGet: error %d\n", r); return 1; }
	sym("cuDeviceGetName")(name, (int)sizeof name, dev);
	sym("cuDeviceTotalMem_v2")(&total, dev);
	if ((r = sym("cuCtxCreate_v2")(&ctx, 0, dev))) { fprintf(stderr, "probe: cuCtxCreate: error %d\n", r); return 1; }
	/* Asked of the context's device after it exists: MPS reports the
	   SMs the client's thread percentage leaves it. */
	sym("cuDeviceGetAttribute")(&sms, SM_COUNT, dev);
	printf("probe: sms=%d total_mib=%zu name=%s\n", sms, total >> 20, name);
	for (int i = 1; i < argc; i++) {
		unsigned long long p = 0;
		size_t mib = strtoull(argv[i], NULL, 10);
		r = sym("cuMemAlloc_v2")(&p, mib << 20);
		printf("probe: alloc %zu -> %d\n", mib, r);
		if (!r) sym("cuMemFree_v2")(p);
	}
	sym("cuCtxDestroy_v2")(ctx);
	return 0;
}
