/* vectorAdd on the CUDA driver API, libcuda loaded with dlopen: no CUDA
   toolkit needed to build it. The kernel is PTX, JIT-compiled by the
   driver (libnvidia-ptxjitcompiler, which the spec mounts). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static const char *ptx =
	".version 6.0\n.target sm_50\n.address_size 64\n"
	".visible .entry vadd(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 pn)\n{\n"
	".reg .pred %p<2>;\n.reg .b32 %r<6>;\n.reg .f32 %f<4>;\n.reg .b64 %rd<11>;\n"
	"ld.param.u64 %rd1, [pa];\nld.param.u64 %rd2, [pb];\nld.param.u64 %rd3, [pc];\nld.param.u32 %r2, [pn];\n"
	"mov.u32 %r3, %ctaid.x;\nmov.u32 %r4, %ntid.x;\nmov.u32 %r5, %tid.x;\nmad.lo.s32 %r1, %r3, %r4, %r5;\n"
	"setp.ge.s32 %p1, %r1, %r2;\n@%p1 bra DONE;\n"
	"cvta.to.global.u64 %rd4, %rd1;\ncvta.to.global.u64 %rd5, %rd2;\ncvta.to.global.u64 %rd6, %rd3;\n"
	"mul.wide.s32 %rd7, %r1, 4;\nadd.s64 %rd8, %rd4, %rd7;\nadd.s64 %rd9, %rd5, %rd7;\nadd.s64 %rd10, %rd6, %rd7;\n"
	"ld.global.f32 %f1, [%rd8];\nld.global.f32 %f2, [%rd9];\nadd.f32 %f3, %f1, %f2;\nst.global.f32 [%rd10], %f3;\n"
	"DONE:\nret;\n}\n";

typedef int (*fn)();
static void *cuda;
static fn get(const char *name) {
	fn f = (fn)dlsym(cuda, name);
	if (!f) { fprintf(stderr, "CUDA: %s not in libcuda.so.1\n", name); exit(1); }
	return f;
}
#define CHECK(call) do { int r_ = (call); if (r_) { const char *s_ = "?"; \
	get("cuGetErrorString")(r_, &s_); fprintf(stderr, "CUDA: %s: error %d: %s\n", #call, r_, s_); return 1; } } while (0)

int main(void) {
	enum { N = 1 << 20 };
	cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) { fprintf(stderr, "CUDA: %s\n", dlerror()); return 1; }
	int dev, count = 0;
	void *ctx, *mod, *fun;
	unsigned long long da, db, dc;
	char name[128] = "";
	CHECK(get("cuInit")(0));
	CHECK(get("cuDeviceGetCount")(&count));
	if (count < 1) { fprintf(stderr, "CUDA: no device\n"); return 1; }
	CHECK(get("cuDeviceGet")(&dev, 0));
	CHECK(get("cuDeviceGetName")(name, (int)sizeof name, dev));
	CHECK(get("cuCtxCreate_v2")(&ctx, 0, dev));
	CHECK(get("cuModuleLoadData")(&mod, ptx));
	CHECK(get("cuModuleGetFunction")(&fun, mod, "vadd"));
	float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
	for (int i = 0; i < N; i++) { a[i] = i; b[i] = 2 * i; c[i] = 0; }
	CHECK(get("cuMemAlloc_v2")(&da, (size_t)N * 4));
	CHECK(get("cuMemAlloc_v2")(&db, (size_t)N * 4));
	CHECK(get("cuMemAlloc_v2")(&dc, (size_t)N * 4));
	CHECK(get("cuMemcpyHtoD_v2")(da, a, (size_t)N * 4));
	CHECK(get("cuMemcpyHtoD_v2")(db, b, (size_t)N * 4));
	unsigned n = N;
	void *args[] = {&da, &db, &dc, &n};
	CHECK(get("cuLaunchKernel")(fun, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CHECK(get("cuCtxSynchronize")());
	CHECK(get("cuMemcpyDtoH_v2")(c, dc, (size_t)N * 4));
	for (int i = 0; i < N; i++)
		if (c[i] != 3.0f * i) { fprintf(stderr, "CUDA: c[%d] = %g, want %g\n", i, c[i], 3.0 * i); return 1; }
	CHECK(get("cuCtxDestroy_v2")(ctx));
	printf("vectorAdd of %d floats on %s: ok\n", N, name);
	return 0;
}
