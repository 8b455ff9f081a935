/*
 * A test double of the driver's libnvidia-ml.so.1 for machines without a
 * GPU. It exports the NVML entry points gpuctk calls, under the versioned
 * symbol names go-nvml resolves, with the structure layouts and return codes
 * of the NVML API reference. The host it describes is read at nvmlInit from
 * the file named by $GPUCTK_FAKE_NVML_HOST, written by the Go package
 * github.com/gpuctk/gpuctk/tests/fakenvml. One line per fact, fields
 * separated by single spaces, the GPU name last because it holds spaces:
 *
 *   driver <version>
 *   cuda <version as NVML encodes it: 12040 for 12.4>
 *   gpu <index> <minor> <on|off|unsupported> <memory MiB> <cc major> <cc minor> <uuid> <pci bus id> <name>
 *   mig <slot> <gi> <ci> <gi slices> <ci slices> <memory MiB> <SMs> <uuid>
 *   slots <MIG slots of the GPU above>
 *   fail <function> <gpu index or -> <return code>
 *
 * A mig or slots line belongs to the gpu line above it. A fail line makes
 * the named function return the code, for that GPU (and its MIG devices)
 * or for every call.
 *
 * Where NVML has versioned entry points only the version go-nvml prefers
 * is exported (nvmlInit_v2, nvmlDeviceGetCount_v2, ..._HandleByIndex_v2,
 * ..._PciInfo_v3, ..._Attributes_v2): go-nvml dlsyms those at load and
 * falls back to the unversioned name, so a wrong choice ends the process
 * with "symbol lookup error" instead of passing quietly.
 *
 * Declarations are our own, from the NVML API reference; no NVIDIA header
 * is used. Build: gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -Wl,-z,nodelete
 * (nodelete: go-nvml dlcloses the library at nvmlShutdown, but the calls it
 * made are bound to this copy, so it must stay mapped for a later nvmlInit).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* nvmlReturn_t values. */
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_IRQ_ISSUE = 11,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_CORRUPTED_INFOROM = 14,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_UNKNOWN = 999,
};
typedef int nvmlReturn_t;

/* nvmlPciInfo_t (the _v3 layout). */
struct pci_info {
	char bus_id_legacy[16];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pci_device_id;
	unsigned int pci_subsystem_id;
	char bus_id[32];
};
_Static_assert(sizeof(struct pci_info) == 68, "nvmlPciInfo_t layout");

/* nvmlMemory_t. */
struct memory {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
};
_Static_assert(sizeof(struct memory) == 24, "nvmlMemory_t layout");

/* nvmlDeviceAttributes_t. */
struct attributes {
	unsigned int multiprocessor_count;
	unsigned int shared_copy_engine_count;
	unsigned int shared_decoder_count;
	unsigned int shared_encoder_count;
	unsigned int shared_jpeg_count;
	unsigned int shared_ofa_count;
	unsigned int gpu_instance_slice_count;
	unsigned int compute_instance_slice_count;
	unsigned long long memory_size_mb;
};
_Static_assert(sizeof(struct attributes) == 40, "nvmlDeviceAttributes_t layout");

#define MAX_GPUS 64
#define MAX_SLOTS 16
#define MAX_FAULTS 32
#define MIG_OFF 0
#define MIG_ON 1
#define MIG_UNSUPPORTED 2

/* A device handle (nvmlDevice_t) points at one of these. */
struct device {
	int present;
	int is_mig;
	struct device *parent;
	unsigned int index, minor, mig_mode, slots;
	unsigned long long memory_mib;
	int cc_major, cc_minor;
	char uuid[96], bus_id[32], name[96];
	/* MIG devices only. */
	unsigned int slot, gi, ci, gi_slices, ci_slices, sms;
	struct device *mig;
};
typedef struct device *nvmlDevice_t;

struct fault {
	char function[64];
	int gpu; /* -1: every call */
	nvmlReturn_t ret;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static char driver_version[80];
static int cuda_version;
static struct device gpus[MAX_GPUS];
static struct device migs[MAX_GPUS][MAX_SLOTS];
static unsigned int ngpus;
static struct fault faults[MAX_FAULTS];
static int nfaults;

/* injected returns the fault set for function on the GPU of dev. */
static nvmlReturn_t injected(const char *function, const struct device *dev)
{
	int gpu = -1;
	if (dev)
		gpu = (int)(dev->is_mig ? dev->parent->index : dev->index);
	for (int i = 0; i < nfaults; i++)
		if (strcmp(faults[i].function, function) == 0 && (faults[i].gpu == -1 || faults[i].gpu == gpu))
			return faults[i].ret;
	return NVML_SUCCESS;
}

/* valid reports whether d is a handle this library gave out. */
static int valid(const struct device *d)
{
	const char *p = (const char *)d;
	if (p >= (const char *)gpus && p < (const char *)(gpus + ngpus))
		return ((p - (const char *)gpus) % sizeof *d) == 0;
	if (p >= (const char *)migs && p < (const char *)(migs + MAX_GPUS))
		return ((p - (const char *)migs) % sizeof *d) == 0 && d->present;
	return 0;
}

/* enter is the common prologue of a device call. */
#define ENTER(dev, out)                                   \
	do {                                              \
		if (init_count == 0)                      \
			return NVML_ERROR_UNINITIALIZED;  \
		if (!valid(dev) || (out) == NULL)         \
			return NVML_ERROR_INVALID_ARGUMENT; \
		nvmlReturn_t r_ = injected(__func__, dev); \
		if (r_ != NVML_SUCCESS)                   \
			return r_;                        \
	} while (0)

#define ENTER_SYSTEM(out)                                 \
	do {                                              \
		if (init_count == 0)                      \
			return NVML_ERROR_UNINITIALIZED;  \
		if ((out) == NULL)                        \
			return NVML_ERROR_INVALID_ARGUMENT; \
		nvmlReturn_t r_ = injected(__func__, NULL); \
		if (r_ != NVML_SUCCESS)                   \
			return r_;                        \
	} while (0)

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
	if (strlen(src) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	strcpy(dst, src);
	return NVML_SUCCESS;
}

static int bad_line(const char *path, int n, const char *what)
{
	fprintf(stderr, "fakenvml: %s line %d: %s\n", path, n, what);
	return NVML_ERROR_UNKNOWN;
}

/* load reads the host file; it returns an NVML code. */
static nvmlReturn_t load(void)
{
	const char *path = getenv("GPUCTK_FAKE_NVML_HOST");
	if (path == NULL || *path == '\0')
		return NVML_ERROR_DRIVER_NOT_LOADED;
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		fprintf(stderr, "fakenvml: cannot open %s\n", path);
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	memset(gpus, 0, sizeof gpus);
	memset(migs, 0, sizeof migs);
	ngpus = 0;
	nfaults = 0;
	driver_version[0] = '\0';
	cuda_version = 0;

	char line[512];
	int n = 0;
	nvmlReturn_t ret = NVML_SUCCESS;
	struct device *g = NULL;
	while (ret == NVML_SUCCESS && fgets(line, sizeof line, f)) {
		n++;
		line[strcspn(line, "\n")] = '\0';
		char mode[16];
		int name_at = 0;
		if (line[0] == '\0' || line[0] == '#')
			continue;
		if (sscanf(line, "driver %79s", driver_version) == 1)
			continue;
		if (sscanf(line, "cuda %d", &cuda_version) == 1)
			continue;
		if (strncmp(line, "gpu ", 4) == 0) {
			if (ngpus == MAX_GPUS) {
				ret = bad_line(path, n, "too many GPUs");
				break;
			}
			g = &gpus[ngpus];
			if (sscanf(line, "gpu %u %u %15s %llu %d %d %95s %31s %n", &g->index, &g->minor, mode,
				   &g->memory_mib, &g->cc_major, &g->cc_minor, g->uuid, g->bus_id, &name_at) < 8 ||
			    name_at == 0) {
				ret = bad_line(path, n, "want: gpu INDEX MINOR on|off|unsupported MEMORY-MIB CC-MAJOR CC-MINOR UUID PCI-BUS-ID NAME");
				break;
			}
			snprintf(g->name, sizeof g->name, "%s", line + name_at);
			if (strcmp(mode, "on") == 0)
				g->mig_mode = MIG_ON;
			else if (strcmp(mode, "off") == 0)
				g->mig_mode = MIG_OFF;
			else if (strcmp(mode, "unsupported") == 0)
				g->mig_mode = MIG_UNSUPPORTED;
			else {
				ret = bad_line(path, n, "MIG mode must be on, off or unsupported");
				break;
			}
			g->present = 1;
			g->slots = g->mig_mode == MIG_UNSUPPORTED ? 0 : 7;
			g->mig = migs[ngpus];
			ngpus++;
			continue;
		}
		if (strncmp(line, "mig ", 4) == 0) {
			struct device m = {0};
			if (g == NULL || g->mig_mode != MIG_ON) {
				ret = bad_line(path, n, "mig line without a gpu line in MIG mode above it");
				break;
			}
			if (sscanf(line, "mig %u %u %u %u %u %llu %u %95s", &m.slot, &m.gi, &m.ci, &m.gi_slices,
				   &m.ci_slices, &m.memory_mib, &m.sms, m.uuid) != 8) {
				ret = bad_line(path, n, "want: mig SLOT GI CI GI-SLICES CI-SLICES MEMORY-MIB SMS UUID");
				break;
			}
			if (m.slot >= MAX_SLOTS) {
				ret = bad_line(path, n, "MIG slot out of range");
				break;
			}
			m.present = 1;
			m.is_mig = 1;
			m.parent = g;
			g->mig[m.slot] = m;
			if (m.slot >= g->slots)
				g->slots = m.slot + 1;
			continue;
		}
		if (strncmp(line, "slots ", 6) == 0) {
			if (g == NULL || sscanf(line, "slots %u", &g->slots) != 1 || g->slots > MAX_SLOTS) {
				ret = bad_line(path, n, "want: slots N (at most 16) after a gpu line");
				break;
			}
			continue;
		}
		if (strncmp(line, "fail ", 5) == 0) {
			struct fault *x = &faults[nfaults];
			char gpu[16];
			if (nfaults == MAX_FAULTS || sscanf(line, "fail %63s %15s %d", x->function, gpu, &x->ret) != 3) {
				ret = bad_line(path, n, "want: fail FUNCTION GPU-INDEX|- RETURN-CODE");
				break;
			}
			x->gpu = strcmp(gpu, "-") == 0 ? -1 : atoi(gpu);
			nfaults++;
			continue;
		}
		ret = bad_line(path, n, "unknown line");
	}
	fclose(f);
	if (ret == NVML_SUCCESS && driver_version[0] == '\0')
		ret = bad_line(path, n, "no driver line");
	return ret;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (init_count == 0) {
		ret = load();
		if (ret == NVML_SUCCESS)
			ret = injected(__func__, NULL);
	}
	if (ret == NVML_SUCCESS)
		init_count++;
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	(void)flags;
	return nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (init_count == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else
		init_count--;
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NO_PERMISSION:
		return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED:
		return "Already Initialized";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_INSUFFICIENT_POWER:
		return "Insufficient External Power";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT:
		return "Timeout";
	case NVML_ERROR_IRQ_ISSUE:
		return "Interrupt Request Issue";
	case NVML_ERROR_LIBRARY_NOT_FOUND:
		return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return "Function Not Found";
	case NVML_ERROR_CORRUPTED_INFOROM:
		return "Corrupted infoROM";
	case NVML_ERROR_GPU_IS_LOST:
		return "GPU is lost";
	case NVML_ERROR_RESET_REQUIRED:
		return "GPU requires restart";
	case NVML_ERROR_OPERATING_SYSTEM:
		return "The operating system has blocked the request";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
		return "RM has detected an NVML/RM version mismatch";
	case NVML_ERROR_IN_USE:
		return "In use by another client";
	default:
		return "Unknown Error";
	}
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	ENTER_SYSTEM(version);
	return copy_string(version, length, driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
	ENTER_SYSTEM(version);
	*version = cuda_version;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	ENTER_SYSTEM(version);
	*version = cuda_version;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	ENTER_SYSTEM(count);
	*count = ngpus;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	ENTER_SYSTEM(device);
	if (index >= ngpus)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &gpus[index];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	ENTER(device, index);
	if (device->is_mig)
		return NVML_ERROR_NOT_SUPPORTED;
	*index = device->index;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
	ENTER(device, minor);
	if (device->is_mig)
		return NVML_ERROR_NOT_SUPPORTED;
	*minor = device->minor;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	ENTER(device, uuid);
	return copy_string(uuid, length, device->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	ENTER(device, name);
	return copy_string(name, length, device->is_mig ? device->parent->name : device->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, struct pci_info *pci)
{
	ENTER(device, pci);
	const struct device *g = device->is_mig ? device->parent : device;
	memset(pci, 0, sizeof *pci);
	snprintf(pci->bus_id, sizeof pci->bus_id, "%s", g->bus_id);
	if (sscanf(g->bus_id, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device) != 3)
		return NVML_ERROR_UNKNOWN;
	snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "%04x:%02x:%02x.0", pci->domain & 0xffff,
		 pci->bus & 0xff, pci->device & 0xff);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, struct memory *memory)
{
	ENTER(device, memory);
	memory->total = device->memory_mib << 20;
	memory->free = memory->total;
	memory->used = 0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	ENTER(device, major);
	if (minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct device *g = device->is_mig ? device->parent : device;
	*major = g->cc_major;
	*minor = g->cc_minor;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
	ENTER(device, current);
	if (pending == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (device->is_mig || device->mig_mode == MIG_UNSUPPORTED)
		return NVML_ERROR_NOT_SUPPORTED;
	*current = *pending = device->mig_mode;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
	ENTER(device, count);
	if (device->is_mig || device->mig_mode == MIG_UNSUPPORTED)
		return NVML_ERROR_NOT_SUPPORTED;
	*count = device->slots;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig)
{
	ENTER(device, mig);
	if (device->is_mig || device->mig_mode == MIG_UNSUPPORTED)
		return NVML_ERROR_NOT_SUPPORTED;
	if (index >= device->slots)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (device->mig_mode != MIG_ON || !device->mig[index].present)
		return NVML_ERROR_NOT_FOUND;
	*mig = &device->mig[index];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig)
{
	ENTER(device, is_mig);
	*is_mig = device->is_mig;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device)
{
	ENTER(mig, device);
	if (!mig->is_mig)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = mig->parent;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
	ENTER(device, id);
	if (!device->is_mig)
		return NVML_ERROR_NOT_SUPPORTED;
	*id = device->gi;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
	ENTER(device, id);
	if (!device->is_mig)
		return NVML_ERROR_NOT_SUPPORTED;
	*id = device->ci;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, struct attributes *attr)
{
	ENTER(device, attr);
	memset(attr, 0, sizeof *attr);
	attr->memory_size_mb = device->memory_mib;
	if (device->is_mig) {
		attr->multiprocessor_count = device->sms;
		attr->gpu_instance_slice_count = device->gi_slices;
		attr->compute_instance_slice_count = device->ci_slices;
	}
	return NVML_SUCCESS;
}
