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
 *   mig <slot> <gi> <ci> <gi slices> <ci slices> <memory MiB> <SMs> <uuid> [<engines>]
 *   slots <MIG slots of the GPU above>
 *   pci <PCI device id of the GPU above, as NVML's pciDeviceId: 0x233510DE>
 *   profile <NVML GPU instance profile> <compute slices> <memory slices> <memory MiB> <SMs> <starts, comma separated> [<engines> [<instances> <name>]]
 *   gi <id> <profile> <start> <memory slices>
 *   proc <gpu index> <pid>
 *   fail <function> <gpu index or -> <return code>
 *   topo <level to GPU 0> <level to GPU 1> ...   (of the gpu line above)
 *   numa <NUMA node>   (of the gpu line above; none: NVML does not say)
 *
 * <engines> are five counts, as nvidia-smi mig -lgip lists them: copy
 * engines, decoders, encoders, JPEG decoders, optical flow accelerators; 0
 * when left out. A MIG device reports its own as its shared engines; a
 * profile, as its GPU instances' engines, which MIG devices made on them get.
 * A profile's <instances> is NVML's instanceCount (default: one per start)
 * and <name> the one nvidia-smi prints after "MIG " (1g.18gb+me), which
 * nvmlDeviceGetGpuInstanceProfileInfoV reports. A GPU has as many memory
 * slices as its profiles' placements span (8 without profiles), and as
 * many compute slices as its largest profile has.
 *
 * Events: nvmlEventSetWait_v2 reads the file named by the host file's path
 * plus ".events" from where the last wait of the set stopped, one event a
 * line, "xid <gpu index> <xid> [<gi> <ci>]" (the GPU and compute instance
 * of a MIG device; none: the whole GPU), and returns the first for a GPU
 * registered for critical XID events; with none, it polls the file until
 * the timeout and returns NVML_ERROR_TIMEOUT. Tests append lines.
 * A mig, slots, profile or gi line belongs to the gpu line above it. A
 * GPU instance holding a MIG device needs no gi line: its placement
 * follows from its id (see gi_place). A proc line is a compute process on
 * the GPU. A fail line makes the named function return the code, for that
 * GPU (and its MIG devices) or for every call.
 *
 * MIG changes (MIG mode, GPU and compute instances created and destroyed)
 * rewrite the host file, with a temporary file and a rename, so that the
 * next process that loads the library sees them, as it would on a GPU.
 * A compute instance always spans its GPU instance, the only kind gpuctk
 * creates.
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
#include <unistd.h>

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
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
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
#define MAX_GPUS_TOPO 64
#define MAX_SLOTS 16
#define MAX_FAULTS 32
#define MIG_OFF 0
#define MIG_ON 1
#define MIG_UNSUPPORTED 2

/* Engine counts of a MIG device or a GPU instance profile. */
struct engines {
	unsigned int copy, decoder, encoder, jpeg, ofa;
};

/* A device handle (nvmlDevice_t) points at one of these. */
struct device {
	int present;
	int is_mig;
	struct device *parent;
	unsigned int index, minor, mig_mode, slots;
	unsigned long long memory_mib;
	int cc_major, cc_minor;
	char uuid[96], bus_id[32], name[96];
	unsigned int pci_device_id;
	/* MIG devices only. */
	unsigned int slot, gi, ci, gi_slices, ci_slices, sms;
	struct engines engines;
	struct device *mig;
	/* GPUs: topology level to each GPU by index; ntopo 0: not known. */
	unsigned int topo[MAX_GPUS_TOPO], ntopo;
	/* GPUs: NUMA node, when has_numa. */
	int has_numa;
	unsigned int numa;
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

#define MAX_PROFILES 18 /* NVML_GPU_INSTANCE_PROFILE_COUNT */
#define MAX_GIS 16 /* GPU instance ids are 0-14 on 8 memory slices */
#define MAX_PROCS 64

/* A GPU instance profile of a GPU. */
struct profile {
	int present;
	unsigned int compute, memory_slices, sms, starts; /* starts: bit mask */
	unsigned int instances;
	unsigned long long memory_mib;
	struct engines engines;
	char name[64];
};

/* A GPU instance; an nvmlGpuInstance_t points at one. */
struct gpu_instance {
	int present;
	struct device *gpu;
	unsigned int id, profile, start, size;
};
typedef struct gpu_instance *nvmlGpuInstance_t;

/*
 * A compute instance handle names its MIG device by GPU, GPU instance and
 * compute instance, so that it stays valid while other MIG devices come
 * and go and the MIG devices are renumbered.
 */
struct ci_handle {
	unsigned int gpu, gi, ci;
};
typedef struct ci_handle *nvmlComputeInstance_t;
#define MAX_CIS 8

struct proc {
	unsigned int gpu, pid;
};

static struct profile profiles[MAX_GPUS][MAX_PROFILES];
static struct gpu_instance instances[MAX_GPUS][MAX_GIS];
static struct ci_handle ci_handles[MAX_GPUS][MAX_GIS][MAX_CIS];
static struct proc procs[MAX_PROCS];
static int nprocs;
static char host_path[4096];

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

/* memory_slices_of returns how many memory slices GPU i has: 8 (an A100's, an H100's) unless its profiles say otherwise. */
static unsigned int memory_slices_of(unsigned int i)
{
	unsigned int n = 0;
	for (unsigned int p = 0; p < MAX_PROFILES; p++)
		for (unsigned int b = 0; b < 16; b++)
			if (profiles[i][p].present && (profiles[i][p].starts & (1u << b)) &&
			    b + profiles[i][p].memory_slices > n)
				n = b + profiles[i][p].memory_slices;
	return n ? n : 8;
}

/* compute_slices_of returns how many compute slices GPU i has: its largest profile's, 7 without profiles. */
static unsigned int compute_slices_of(unsigned int i)
{
	unsigned int n = 0;
	for (unsigned int p = 0; p < MAX_PROFILES; p++)
		if (profiles[i][p].present && profiles[i][p].compute > n)
			n = profiles[i][p].compute;
	return n ? n : 7;
}

/*
 * gi_place gives the placement of GPU instance id on a GPU of total memory
 * slices: they form a binary tree numbered breadth first, as NVML numbers
 * GPU instances (on 8 slices, 0 the whole GPU, 1-2 its halves, 3-6
 * quarters, 7-14 single slices).
 */
static void gi_place(unsigned int total, unsigned int id, unsigned int *start, unsigned int *size)
{
	unsigned int level = 1; /* instances of this size: 1, 2, 4, ... */
	while (id >= 2 * level - 1 && level < total)
		level *= 2;
	*size = total / level;
	*start = (id - (level - 1)) * *size;
}

static unsigned int gi_id(unsigned int total, unsigned int start, unsigned int size)
{
	unsigned int span = 1;
	while (span < size)
		span *= 2;
	return total / span - 1 + start / span;
}

/* derive_instances adds the GPU instances of MIG devices that no gi line gave. */
static void derive_instances(void)
{
	static const unsigned int by_slices[] = {0, 0, 1, 2, 3, 3, 3, 4, 4};
	for (unsigned int i = 0; i < ngpus; i++) {
		for (int s = 0; s < MAX_SLOTS; s++) {
			const struct device *m = &migs[i][s];
			if (!m->present || m->gi >= MAX_GIS || instances[i][m->gi].present)
				continue;
			struct gpu_instance *x = &instances[i][m->gi];
			x->present = 1;
			x->gpu = &gpus[i];
			x->id = m->gi;
			gi_place(memory_slices_of(i), m->gi, &x->start, &x->size);
			x->profile = by_slices[m->gi_slices < 8 ? m->gi_slices : 8];
			for (unsigned int p = 0; p < MAX_PROFILES; p++)
				if (profiles[i][p].present && profiles[i][p].compute == m->gi_slices &&
				    profiles[i][p].memory_slices == x->size) {
					x->profile = p;
					break;
				}
		}
	}
}

/* save writes the host back to its file, atomically; it returns an NVML code. */
static nvmlReturn_t save(void)
{
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.fakenvml-tmp", host_path);
	FILE *f = fopen(tmp, "w");
	if (f == NULL)
		return NVML_ERROR_UNKNOWN;
	fprintf(f, "# host for the fake libnvidia-ml.so.1, rewritten after a MIG change\n");
	fprintf(f, "driver %s\ncuda %d\n", driver_version, cuda_version);
	static const char *modes[] = {"off", "on", "unsupported"};
	for (unsigned int i = 0; i < ngpus; i++) {
		const struct device *g = &gpus[i];
		fprintf(f, "gpu %u %u %s %llu %d %d %s %s %s\n", g->index, g->minor, modes[g->mig_mode], g->memory_mib,
			g->cc_major, g->cc_minor, g->uuid, g->bus_id, g->name);
		fprintf(f, "slots %u\n", g->slots);
		if (g->pci_device_id)
			fprintf(f, "pci 0x%08X\n", g->pci_device_id);
		if (g->has_numa)
			fprintf(f, "numa %u\n", g->numa);
		if (g->ntopo > 0) {
			fprintf(f, "topo");
			for (unsigned int t = 0; t < g->ntopo; t++)
				fprintf(f, " %u", g->topo[t]);
			fprintf(f, "\n");
		}
		for (unsigned int p = 0; p < MAX_PROFILES; p++) {
			const struct profile *pr = &profiles[i][p];
			if (!pr->present)
				continue;
			fprintf(f, "profile %u %u %u %llu %u ", p, pr->compute, pr->memory_slices, pr->memory_mib, pr->sms);
			const char *sep = "";
			for (int b = 0; b < 16; b++)
				if (pr->starts & (1u << b)) {
					fprintf(f, "%s%d", sep, b);
					sep = ",";
				}
			fprintf(f, " %u %u %u %u %u %u %s\n", pr->engines.copy, pr->engines.decoder, pr->engines.encoder,
				pr->engines.jpeg, pr->engines.ofa, pr->instances, pr->name[0] ? pr->name : "-");
		}
		for (int id = 0; id < MAX_GIS; id++) {
			const struct gpu_instance *x = &instances[i][id];
			if (x->present)
				fprintf(f, "gi %u %u %u %u\n", x->id, x->profile, x->start, x->size);
		}
		for (int s = 0; s < MAX_SLOTS; s++) {
			const struct device *m = &migs[i][s];
			if (m->present)
				fprintf(f, "mig %u %u %u %u %u %llu %u %s %u %u %u %u %u\n", m->slot, m->gi, m->ci,
					m->gi_slices, m->ci_slices, m->memory_mib, m->sms, m->uuid, m->engines.copy,
					m->engines.decoder, m->engines.encoder, m->engines.jpeg, m->engines.ofa);
		}
	}
	for (int i = 0; i < nprocs; i++)
		fprintf(f, "proc %u %u\n", procs[i].gpu, procs[i].pid);
	for (int i = 0; i < nfaults; i++) {
		if (faults[i].gpu < 0)
			fprintf(f, "fail %s - %d\n", faults[i].function, faults[i].ret);
		else
			fprintf(f, "fail %s %d %d\n", faults[i].function, faults[i].gpu, faults[i].ret);
	}
	int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, host_path) != 0) {
		unlink(tmp);
		return NVML_ERROR_UNKNOWN;
	}
	return NVML_SUCCESS;
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
	snprintf(host_path, sizeof host_path, "%s", path);
	memset(gpus, 0, sizeof gpus);
	memset(migs, 0, sizeof migs);
	memset(profiles, 0, sizeof profiles);
	memset(instances, 0, sizeof instances);
	ngpus = 0;
	nfaults = 0;
	nprocs = 0;
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
			int got = sscanf(line, "mig %u %u %u %u %u %llu %u %95s %u %u %u %u %u", &m.slot, &m.gi, &m.ci,
					 &m.gi_slices, &m.ci_slices, &m.memory_mib, &m.sms, m.uuid, &m.engines.copy,
					 &m.engines.decoder, &m.engines.encoder, &m.engines.jpeg, &m.engines.ofa);
			if (got != 8 && got != 13) {
				ret = bad_line(path, n, "want: mig SLOT GI CI GI-SLICES CI-SLICES MEMORY-MIB SMS UUID [CE DEC ENC JPEG OFA]");
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
		if (strncmp(line, "pci ", 4) == 0) {
			if (g == NULL || sscanf(line, "pci %x", &g->pci_device_id) != 1) {
				ret = bad_line(path, n, "want: pci 0xDDDDVVVV after a gpu line");
				break;
			}
			continue;
		}
		if (strncmp(line, "slots ", 6) == 0) {
			if (g == NULL || sscanf(line, "slots %u", &g->slots) != 1 || g->slots > MAX_SLOTS) {
				ret = bad_line(path, n, "want: slots N (at most 16) after a gpu line");
				break;
			}
			continue;
		}
		if (strncmp(line, "profile ", 8) == 0) {
			unsigned int id;
			struct profile pr = {0};
			char starts[64];
			int got = g == NULL ? 0
					    : sscanf(line, "profile %u %u %u %llu %u %63s %u %u %u %u %u %u %63s", &id, &pr.compute,
						     &pr.memory_slices, &pr.memory_mib, &pr.sms, starts, &pr.engines.copy,
						     &pr.engines.decoder, &pr.engines.encoder, &pr.engines.jpeg,
						     &pr.engines.ofa, &pr.instances, pr.name);
			if ((got != 6 && got != 11 && got != 13) || id >= MAX_PROFILES) {
				ret = bad_line(path, n, "want: profile ID COMPUTE-SLICES MEMORY-SLICES MEMORY-MIB SMS START,START,... [CE DEC ENC JPEG OFA [INSTANCES NAME]] after a gpu line");
				break;
			}
			if (strcmp(pr.name, "-") == 0)
				pr.name[0] = '\0';
			for (char *t = strtok(starts, ","); t; t = strtok(NULL, ","))
				pr.starts |= 1u << (atoi(t) & 15);
			if (pr.instances == 0)
				pr.instances = __builtin_popcount(pr.starts);
			pr.present = 1;
			profiles[g - gpus][id] = pr;
			continue;
		}
		if (strncmp(line, "gi ", 3) == 0) {
			struct gpu_instance x = {0};
			if (g == NULL || sscanf(line, "gi %u %u %u %u", &x.id, &x.profile, &x.start, &x.size) != 4 ||
			    x.id >= MAX_GIS || x.profile >= MAX_PROFILES) {
				ret = bad_line(path, n, "want: gi ID PROFILE START SIZE after a gpu line");
				break;
			}
			x.present = 1;
			x.gpu = g;
			instances[g - gpus][x.id] = x;
			continue;
		}
		if (strncmp(line, "topo ", 5) == 0) {
			if (g == NULL) {
				ret = bad_line(path, n, "topo line without a gpu line above it");
				break;
			}
			char *p = line + 5, *end;
			g->ntopo = 0;
			for (unsigned long v = strtoul(p, &end, 10); end != p && g->ntopo < MAX_GPUS_TOPO;
			     v = strtoul(p, &end, 10)) {
				g->topo[g->ntopo++] = (unsigned int)v;
				p = end;
			}
			continue;
		}
		if (strncmp(line, "numa ", 5) == 0) {
			if (g == NULL || sscanf(line, "numa %u", &g->numa) != 1) {
				ret = bad_line(path, n, "want: numa NODE after a gpu line");
				break;
			}
			g->has_numa = 1;
			continue;
		}
		if (strncmp(line, "proc ", 5) == 0) {
			if (nprocs == MAX_PROCS || sscanf(line, "proc %u %u", &procs[nprocs].gpu, &procs[nprocs].pid) != 2) {
				ret = bad_line(path, n, "want: proc GPU-INDEX PID");
				break;
			}
			nprocs++;
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
	if (ret == NVML_SUCCESS)
		derive_instances();
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
	pci->pci_device_id = g->pci_device_id;
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
		attr->shared_copy_engine_count = device->engines.copy;
		attr->shared_decoder_count = device->engines.decoder;
		attr->shared_encoder_count = device->engines.encoder;
		attr->shared_jpeg_count = device->engines.jpeg;
		attr->shared_ofa_count = device->engines.ofa;
		attr->gpu_instance_slice_count = device->gi_slices;
		attr->compute_instance_slice_count = device->ci_slices;
	}
	return NVML_SUCCESS;
}

/* ---- MIG management: the calls mig-parted, nvidia-ctk and gpuctk make ---- */

/* nvmlProcessInfo_t (the _v3 layout). */
struct process_info {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id;
	unsigned int compute_instance_id;
};
_Static_assert(sizeof(struct process_info) == 24, "nvmlProcessInfo_t layout");

/* nvmlGpuInstancePlacement_t. */
struct placement {
	unsigned int start;
	unsigned int size;
};

/* nvmlGpuInstanceProfileInfo_t. */
struct gi_profile_info {
	unsigned int id, is_p2p_supported, slice_count, instance_count, multiprocessor_count;
	unsigned int copy_engine_count, decoder_count, encoder_count, jpeg_count, ofa_count;
	unsigned long long memory_size_mb;
};
_Static_assert(sizeof(struct gi_profile_info) == 48, "nvmlGpuInstanceProfileInfo_t layout");

/* nvmlGpuInstanceInfo_t. */
struct gi_info {
	nvmlDevice_t device;
	unsigned int id, profile_id;
	struct placement placement;
};
_Static_assert(sizeof(struct gi_info) == 24, "nvmlGpuInstanceInfo_t layout");

/* nvmlComputeInstanceProfileInfo_t. */
struct ci_profile_info {
	unsigned int id, slice_count, instance_count, multiprocessor_count;
	unsigned int shared_copy_engine_count, shared_decoder_count, shared_encoder_count, shared_jpeg_count,
		shared_ofa_count;
};
_Static_assert(sizeof(struct ci_profile_info) == 36, "nvmlComputeInstanceProfileInfo_t layout");

/* nvmlComputeInstanceInfo_t. */
struct ci_info {
	nvmlDevice_t device;
	nvmlGpuInstance_t gpu_instance;
	unsigned int id, profile_id;
	struct placement placement;
};
_Static_assert(sizeof(struct ci_info) == 32, "nvmlComputeInstanceInfo_t layout");

/* Slices of NVML's compute instance profiles 0-6 (1, 2, 3, 4, 7, 8, 6 slices). */
static const unsigned int ci_slices[] = {1, 2, 3, 4, 7, 8, 6};
#define CI_PROFILES 7

static int valid_gi(const struct gpu_instance *x)
{
	const char *p = (const char *)x;
	if (p < (const char *)instances || p >= (const char *)(instances + MAX_GPUS))
		return 0;
	return ((p - (const char *)instances) % sizeof *x) == 0 && x->present;
}

/* ci_device returns the MIG device of a compute instance handle, NULL for a bad one. */
static struct device *ci_device(const struct ci_handle *h)
{
	const char *p = (const char *)h;
	if (p < (const char *)ci_handles || p >= (const char *)(ci_handles + MAX_GPUS) ||
	    (p - (const char *)ci_handles) % sizeof *h != 0 || h->gpu >= ngpus)
		return NULL;
	for (int s = 0; s < MAX_SLOTS; s++) {
		struct device *m = &migs[h->gpu][s];
		if (m->present && m->gi == h->gi && m->ci == h->ci)
			return m;
	}
	return NULL;
}

static struct ci_handle *ci_handle_of(const struct device *m)
{
	struct ci_handle *h = &ci_handles[m->parent - gpus][m->gi % MAX_GIS][m->ci % MAX_CIS];
	*h = (struct ci_handle){(unsigned int)(m->parent - gpus), m->gi, m->ci};
	return h;
}

#define ENTER_CI(ci, dev, out)                               \
	do {                                                 \
		if (init_count == 0)                         \
			return NVML_ERROR_UNINITIALIZED;     \
		dev = ci_device(ci);                         \
		if (dev == NULL || (out) == NULL)            \
			return NVML_ERROR_INVALID_ARGUMENT;  \
		nvmlReturn_t r_ = injected(__func__, dev);   \
		if (r_ != NVML_SUCCESS)                      \
			return r_;                           \
	} while (0)

#define ENTER_GI(gi, out)                                    \
	do {                                                 \
		if (init_count == 0)                         \
			return NVML_ERROR_UNINITIALIZED;     \
		if (!valid_gi(gi) || (out) == NULL)          \
			return NVML_ERROR_INVALID_ARGUMENT;  \
		nvmlReturn_t r_ = injected(__func__, (gi)->gpu); \
		if (r_ != NVML_SUCCESS)                      \
			return r_;                           \
	} while (0)

/* mig_ready reports whether a GPU handle is a GPU in MIG mode. */
static nvmlReturn_t mig_ready(const struct device *d)
{
	if (d->is_mig || d->mig_mode == MIG_UNSUPPORTED)
		return NVML_ERROR_NOT_SUPPORTED;
	if (d->mig_mode != MIG_ON)
		return NVML_ERROR_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

static int cmp_mig(const void *a, const void *b)
{
	const struct device *x = a, *y = b;
	if (x->gi != y->gi)
		return x->gi < y->gi ? -1 : 1;
	return x->ci < y->ci ? -1 : x->ci > y->ci;
}

/* renumber gives a GPU's MIG devices their indices in GPU instance order, as NVML does. */
static void renumber(struct device *g)
{
	struct device tmp[MAX_SLOTS];
	int n = 0;
	for (int s = 0; s < MAX_SLOTS; s++)
		if (g->mig[s].present)
			tmp[n++] = g->mig[s];
	qsort(tmp, n, sizeof tmp[0], cmp_mig);
	memset(g->mig, 0, MAX_SLOTS * sizeof g->mig[0]);
	for (int i = 0; i < n; i++) {
		tmp[i].slot = i;
		g->mig[i] = tmp[i];
	}
	if ((unsigned int)n > g->slots)
		g->slots = n;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	ENTER_SYSTEM(device);
	if (uuid == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned int i = 0; i < ngpus; i++) {
		if (strcmp(gpus[i].uuid, uuid) == 0) {
			*device = &gpus[i];
			return NVML_SUCCESS;
		}
		for (int s = 0; s < MAX_SLOTS; s++)
			if (migs[i][s].present && strcmp(migs[i][s].uuid, uuid) == 0) {
				*device = &migs[i][s];
				return NVML_SUCCESS;
			}
	}
	return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
							   struct process_info *infos)
{
	ENTER(device, count);
	unsigned int n = 0;
	for (int i = 0; i < nprocs; i++)
		if (!device->is_mig && procs[i].gpu == device->index)
			n++;
	if (*count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	if (n > 0 && infos == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	n = 0;
	for (int i = 0; i < nprocs; i++)
		if (!device->is_mig && procs[i].gpu == device->index) {
			memset(&infos[n], 0, sizeof infos[n]);
			infos[n++].pid = procs[i].pid;
		}
	*count = n;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activation)
{
	ENTER(device, activation);
	if (device->is_mig || device->mig_mode == MIG_UNSUPPORTED)
		return NVML_ERROR_NOT_SUPPORTED;
	if (mode > MIG_ON)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	for (int id = 0; id < MAX_GIS; id++)
		if (instances[device - gpus][id].present)
			ret = NVML_ERROR_IN_USE;
	if (ret == NVML_SUCCESS) {
		device->mig_mode = mode;
		*activation = NVML_SUCCESS;
		ret = save();
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
							struct gi_profile_info *info)
{
	ENTER(device, info);
	nvmlReturn_t ret = mig_ready(device);
	if (ret != NVML_SUCCESS)
		return ret;
	if (profile >= MAX_PROFILES || !profiles[device - gpus][profile].present)
		return NVML_ERROR_NOT_SUPPORTED;
	const struct profile *pr = &profiles[device - gpus][profile];
	memset(info, 0, sizeof *info);
	info->id = profile;
	info->slice_count = pr->compute;
	info->instance_count = pr->instances;
	info->multiprocessor_count = pr->sms;
	info->copy_engine_count = pr->engines.copy;
	info->decoder_count = pr->engines.decoder;
	info->encoder_count = pr->engines.encoder;
	info->jpeg_count = pr->engines.jpeg;
	info->ofa_count = pr->engines.ofa;
	info->memory_size_mb = pr->memory_mib;
	return NVML_SUCCESS;
}

/* nvmlGpuInstanceProfileInfo_v2_t. */
struct gi_profile_info_v2 {
	unsigned int version;
	unsigned int id, is_p2p_supported, slice_count, instance_count, multiprocessor_count;
	unsigned int copy_engine_count, decoder_count, encoder_count, jpeg_count, ofa_count;
	unsigned long long memory_size_mb;
	char name[96];
};
_Static_assert(sizeof(struct gi_profile_info_v2) == 152, "nvmlGpuInstanceProfileInfo_v2_t layout");
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
							 struct gi_profile_info_v2 *info)
{
	ENTER(device, info);
	if (info->version != (sizeof *info | 2u << 24))
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	struct gi_profile_info v1;
	nvmlReturn_t ret = nvmlDeviceGetGpuInstanceProfileInfo(device, profile, &v1);
	if (ret != NVML_SUCCESS)
		return ret;
	memset(&info->id, 0, sizeof *info - sizeof info->version);
	info->id = v1.id;
	info->is_p2p_supported = v1.is_p2p_supported;
	info->slice_count = v1.slice_count;
	info->instance_count = v1.instance_count;
	info->multiprocessor_count = v1.multiprocessor_count;
	info->copy_engine_count = v1.copy_engine_count;
	info->decoder_count = v1.decoder_count;
	info->encoder_count = v1.encoder_count;
	info->jpeg_count = v1.jpeg_count;
	info->ofa_count = v1.ofa_count;
	info->memory_size_mb = v1.memory_size_mb;
	const struct profile *pr = &profiles[device - gpus][profile];
	if (pr->name[0])
		snprintf(info->name, sizeof info->name, "MIG %s", pr->name);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profile,
								  struct placement *placements, unsigned int *count)
{
	ENTER(device, count);
	nvmlReturn_t ret = mig_ready(device);
	if (ret != NVML_SUCCESS)
		return ret;
	if (profile >= MAX_PROFILES || !profiles[device - gpus][profile].present)
		return NVML_ERROR_NOT_SUPPORTED;
	const struct profile *pr = &profiles[device - gpus][profile];
	unsigned int n = __builtin_popcount(pr->starts);
	if (placements == NULL) {
		*count = n;
		return NVML_SUCCESS;
	}
	if (*count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	n = 0;
	for (unsigned int b = 0; b < 16; b++)
		if (pr->starts & (1u << b))
			placements[n++] = (struct placement){b, pr->memory_slices};
	*count = n;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile, nvmlGpuInstance_t *gis,
					      unsigned int *count)
{
	ENTER(device, count);
	nvmlReturn_t ret = mig_ready(device);
	if (ret != NVML_SUCCESS)
		return ret;
	if (gis == NULL || profile >= MAX_PROFILES || !profiles[device - gpus][profile].present)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned int n = 0;
	for (int id = 0; id < MAX_GIS; id++) {
		struct gpu_instance *x = &instances[device - gpus][id];
		if (x->present && x->profile == profile)
			gis[n++] = x;
	}
	*count = n;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile,
							     const struct placement *placement,
							     nvmlGpuInstance_t *gi)
{
	ENTER(device, gi);
	nvmlReturn_t ret = mig_ready(device);
	if (ret != NVML_SUCCESS)
		return ret;
	unsigned int g = device - gpus;
	if (placement == NULL || profile >= MAX_PROFILES || !profiles[g][profile].present)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct profile *pr = &profiles[g][profile];
	if (placement->start >= 16 || !(pr->starts & (1u << placement->start)) || placement->size != pr->memory_slices)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&lock);
	unsigned int compute = pr->compute;
	for (int id = 0; id < MAX_GIS; id++) {
		const struct gpu_instance *x = &instances[g][id];
		if (!x->present)
			continue;
		compute += profiles[g][x->profile].compute;
		if (x->start < placement->start + placement->size && placement->start < x->start + x->size)
			ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
	}
	unsigned int same = 1;
	for (int id = 0; id < MAX_GIS; id++)
		if (instances[g][id].present && instances[g][id].profile == profile)
			same++;
	if (compute > compute_slices_of(g) || same > pr->instances ||
	    placement->start + placement->size > memory_slices_of(g))
		ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
	unsigned int id = gi_id(memory_slices_of(g), placement->start, placement->size);
	if (ret == NVML_SUCCESS && id < MAX_GIS) {
		struct gpu_instance *x = &instances[g][id];
		*x = (struct gpu_instance){.present = 1, .gpu = device, .id = id, .profile = profile,
					   .start = placement->start, .size = placement->size};
		*gi = x;
		ret = save();
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gi)
{
	ENTER(device, gi);
	nvmlReturn_t ret = mig_ready(device);
	if (ret != NVML_SUCCESS)
		return ret;
	if (id >= MAX_GIS || !instances[device - gpus][id].present)
		return NVML_ERROR_NOT_FOUND;
	*gi = &instances[device - gpus][id];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, struct gi_info *info)
{
	ENTER_GI(gi, info);
	info->device = gi->gpu;
	info->id = gi->id;
	info->profile_id = gi->profile;
	info->placement = (struct placement){gi->start, gi->size};
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi)
{
	ENTER_GI(gi, gi);
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	for (int s = 0; s < MAX_SLOTS; s++)
		if (gi->gpu->mig[s].present && gi->gpu->mig[s].gi == gi->id)
			ret = NVML_ERROR_IN_USE;
	if (ret == NVML_SUCCESS) {
		gi->present = 0;
		ret = save();
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int profile,
								 unsigned int engine, struct ci_profile_info *info)
{
	ENTER_GI(gi, info);
	if (profile >= CI_PROFILES)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct profile *pr = &profiles[gi->gpu - gpus][gi->profile];
	if (engine != 0 || ci_slices[profile] > pr->compute)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(info, 0, sizeof *info);
	info->id = profile;
	info->slice_count = ci_slices[profile];
	info->instance_count = pr->compute / ci_slices[profile];
	info->multiprocessor_count = pr->sms * ci_slices[profile] / pr->compute;
	/* Its compute instances share the GPU instance's engines. */
	info->shared_copy_engine_count = pr->engines.copy;
	info->shared_decoder_count = pr->engines.decoder;
	info->shared_encoder_count = pr->engines.encoder;
	info->shared_jpeg_count = pr->engines.jpeg;
	info->shared_ofa_count = pr->engines.ofa;
	return NVML_SUCCESS;
}

/* nvmlComputeInstanceProfileInfo_v2_t. */
struct ci_profile_info_v2 {
	unsigned int version;
	struct ci_profile_info v1;
	char name[96];
};
_Static_assert(sizeof(struct ci_profile_info_v2) == 136, "nvmlComputeInstanceProfileInfo_v2_t layout");

/*
 * The V call adds the name nvidia-smi mig -lcip prints: the GPU instance
 * profile's for the profile that spans it ("MIG 1g.18gb"), with the
 * compute slices before it for a smaller one ("MIG 1c.2g.35gb").
 */
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gi, unsigned int profile,
								  unsigned int engine, struct ci_profile_info_v2 *info)
{
	ENTER_GI(gi, info);
	if (info->version != (sizeof *info | 2u << 24))
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	nvmlReturn_t ret = nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, profile, engine, &info->v1);
	if (ret != NVML_SUCCESS)
		return ret;
	const struct profile *pr = &profiles[gi->gpu - gpus][gi->profile];
	memset(info->name, 0, sizeof info->name);
	if (pr->name[0] && info->v1.slice_count == pr->compute)
		snprintf(info->name, sizeof info->name, "MIG %s", pr->name);
	else if (pr->name[0])
		snprintf(info->name, sizeof info->name, "MIG %uc.%s", info->v1.slice_count, pr->name);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profile,
							 nvmlComputeInstance_t *ci)
{
	ENTER_GI(gi, ci);
	if (profile >= CI_PROFILES)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct device *g = gi->gpu;
	const struct profile *pr = &profiles[g - gpus][gi->profile];
	if (ci_slices[profile] != pr->compute)
		return NVML_ERROR_NOT_SUPPORTED; /* the fake makes only spanning compute instances */
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	int free_slot = -1;
	for (int s = MAX_SLOTS - 1; s >= 0; s--) {
		if (!g->mig[s].present)
			free_slot = s;
		else if (g->mig[s].gi == gi->id)
			ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
	}
	if (free_slot < 0)
		ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
	if (ret == NVML_SUCCESS) {
		/* A UUID that stays the same for the same GPU and GPU instance: FNV-1a. */
		unsigned long long h = 0xcbf29ce484222325ULL;
		char key[128];
		snprintf(key, sizeof key, "%s/%u", g->uuid, gi->id);
		for (const char *c = key; *c; c++)
			h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
		struct device m = {.present = 1, .is_mig = 1, .parent = g, .gi = gi->id, .ci = 0,
				   .gi_slices = pr->compute, .ci_slices = pr->compute, .memory_mib = pr->memory_mib,
				   .sms = pr->sms, .engines = pr->engines};
		snprintf(m.uuid, sizeof m.uuid, "MIG-%08llx-%04llx-%04llx-%04x-%012llx", h >> 32, (h >> 16) & 0xffff,
			 h & 0xffff, gi->id, (h * 31) & 0xffffffffffffULL);
		g->mig[free_slot] = m;
		renumber(g);
		for (int s = 0; s < MAX_SLOTS; s++)
			if (g->mig[s].present && g->mig[s].gi == gi->id)
				*ci = ci_handle_of(&g->mig[s]);
		ret = save();
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int profile,
						       nvmlComputeInstance_t *cis, unsigned int *count)
{
	ENTER_GI(gi, count);
	if (cis == NULL || profile >= CI_PROFILES)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned int n = 0;
	for (int s = 0; s < MAX_SLOTS; s++) {
		struct device *m = &gi->gpu->mig[s];
		if (m->present && m->gi == gi->id && m->ci_slices == ci_slices[profile] && m->ci < MAX_CIS)
			cis[n++] = ci_handle_of(m);
	}
	*count = n;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci)
{
	struct device *m;
	ENTER_CI(ci, m, ci);
	pthread_mutex_lock(&lock);
	struct device *g = m->parent;
	m->present = 0;
	renumber(g);
	nvmlReturn_t ret = save();
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, struct ci_info *info)
{
	struct device *m;
	ENTER_CI(ci, m, info);
	if (m->gi >= MAX_GIS)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(info, 0, sizeof *info);
	info->device = m->parent;
	info->gpu_instance = &instances[m->parent - gpus][m->gi];
	info->id = m->ci;
	for (unsigned int p = 0; p < CI_PROFILES; p++)
		if (ci_slices[p] == m->ci_slices)
			info->profile_id = p;
	info->placement = (struct placement){0, m->ci_slices};
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, unsigned int *level)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (init_count == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (!valid(a) || !valid(b) || a->is_mig || b->is_mig || level == NULL)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else if ((ret = injected(__func__, a)) == NVML_SUCCESS) {
		if (b->index >= a->ntopo)
			ret = NVML_ERROR_NOT_SUPPORTED;
		else
			*level = a->topo[b->index];
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (init_count == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (!valid(device) || device->is_mig || node == NULL)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else if ((ret = injected(__func__, device)) == NVML_SUCCESS) {
		if (!device->has_numa)
			ret = NVML_ERROR_NOT_SUPPORTED;
		else
			*node = device->numa;
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

/* Events. */
#define EVENT_XID_CRITICAL 8ULL
#define MAX_SETS 8

/* nvmlEventData_t. */
struct event_data {
	nvmlDevice_t device;
	unsigned long long type;
	unsigned long long data;
	unsigned int gi, ci;
};
_Static_assert(sizeof(struct event_data) == 32, "nvmlEventData_t layout");

struct event_set {
	int used;
	unsigned long long types[MAX_GPUS];
	long offset; /* how far the events file has been read */
};
typedef struct event_set *nvmlEventSet_t;
static struct event_set sets[MAX_SETS];

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
	if (init_count == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (set == NULL)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else if ((ret = injected(__func__, NULL)) == NVML_SUCCESS) {
		ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
		for (int i = 0; i < MAX_SETS; i++)
			if (!sets[i].used) {
				memset(&sets[i], 0, sizeof sets[i]);
				sets[i].used = 1;
				/* Only events after the set's creation are seen. */
				char events[4200];
				snprintf(events, sizeof events, "%s.events", host_path);
				FILE *f = fopen(events, "r");
				if (f) {
					fseek(f, 0, SEEK_END);
					sets[i].offset = ftell(f);
					fclose(f);
				}
				*set = &sets[i];
				ret = NVML_SUCCESS;
				break;
			}
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

static int valid_set(const struct event_set *s)
{
	return s >= sets && s < sets + MAX_SETS && s->used;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (init_count == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (!valid(device) || types == NULL)
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else if ((ret = injected(__func__, device)) == NVML_SUCCESS)
		*types = EVENT_XID_CRITICAL;
	pthread_mutex_unlock(&lock);
	return ret;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (init_count == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else if (!valid(device) || device->is_mig || !valid_set(set))
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else if ((ret = injected(__func__, device)) == NVML_SUCCESS) {
		if (types & ~EVENT_XID_CRITICAL)
			ret = NVML_ERROR_NOT_SUPPORTED;
		else
			set->types[device - gpus] |= types;
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

/* next_event reads the set's next registered event; 1 when there was one. */
static int next_event(struct event_set *set, struct event_data *out)
{
	char events[4200], line[256];
	snprintf(events, sizeof events, "%s.events", host_path);
	FILE *f = fopen(events, "r");
	if (f == NULL)
		return 0;
	int found = 0;
	fseek(f, set->offset, SEEK_SET);
	/* Only whole lines: a test may be halfway through writing one. */
	while (!found && fgets(line, sizeof line, f) && strchr(line, '\n')) {
		set->offset = ftell(f);
		unsigned int gpu, gi = 0xFFFFFFFFu, ci = 0xFFFFFFFFu;
		unsigned long long xid;
		if (sscanf(line, "xid %u %llu %u %u", &gpu, &xid, &gi, &ci) < 2) {
			fprintf(stderr, "fakenvml: %s: bad event line: %s", events, line);
			continue;
		}
		for (unsigned int i = 0; i < ngpus; i++)
			if (gpus[i].index == gpu && (set->types[i] & EVENT_XID_CRITICAL)) {
				*out = (struct event_data){&gpus[i], EVENT_XID_CRITICAL, xid, gi, ci};
				found = 1;
			}
	}
	fclose(f);
	return found;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, struct event_data *data, unsigned int timeout_ms)
{
	for (unsigned int waited = 0;; waited += 10) {
		pthread_mutex_lock(&lock);
		nvmlReturn_t ret = NVML_ERROR_TIMEOUT;
		if (init_count == 0)
			ret = NVML_ERROR_UNINITIALIZED;
		else if (!valid_set(set) || data == NULL)
			ret = NVML_ERROR_INVALID_ARGUMENT;
		else if ((ret = injected(__func__, NULL)) == NVML_SUCCESS)
			ret = next_event(set, data) ? NVML_SUCCESS : NVML_ERROR_TIMEOUT;
		pthread_mutex_unlock(&lock);
		if (ret != NVML_ERROR_TIMEOUT || waited >= timeout_ms)
			return ret;
		usleep(10000);
	}
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (!valid_set(set))
		ret = NVML_ERROR_INVALID_ARGUMENT;
	else
		set->used = 0;
	pthread_mutex_unlock(&lock);
	return ret;
}
