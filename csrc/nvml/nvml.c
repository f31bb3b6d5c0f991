/* NVML on pyvgpu's GPUs: the calls tools and libraries make to find and watch GPUs (count, handles, names, UUIDs,
 * PCI ids, compute capability, memory, utilization, versions) answered from the client core: the device snapshots of
 * the hello, and the daemons' STATUS for what changes (memory in use by every session, the share of the last
 * second a device ran work). Every other NVML function answers NVML_ERROR_NOT_SUPPORTED (unsupported_gen.c).
 * Devices are numbered as the CUDA libraries number them (the host map's order). */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "vnvml.h"

#define PV_NVML_MAGIC 0x4e564d4cu
/* The driver branch that brought CUDA 13.0 (what libvcuda answers as), and NVML's version of it. */
#define DRIVER_VERSION "580.00"
#define NVML_VERSION "13.580.00"

struct pv_nvml_dev { uint32_t magic; int index; };
static struct pv_nvml_dev handles[PV_MAX_DEVICES];
static atomic_int inits;

nvmlReturn_t pv_nvml_unsupported(const char *name, atomic_int *once)
{
    pv_census_unsupported("libvnvml", name);
    pv_log_once(once, "%s is not supported by libvnvml (returns NVML_ERROR_NOT_SUPPORTED)", name);
    return NVML_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------------------------ init, versions */
static nvmlReturn_t init(void)
{
    if (pv_init() != PV_SUCCESS)
        return NVML_ERROR_DRIVER_NOT_LOADED;   /* no daemon answered: as NVML without a loaded driver */
    for (int i = 0; i < pv_device_count() && i < PV_MAX_DEVICES; i++)
        handles[i] = (struct pv_nvml_dev){ PV_NVML_MAGIC, i };
    atomic_fetch_add(&inits, 1);
    return NVML_SUCCESS;
}

PV_API nvmlReturn_t nvmlInit_v2(void) { return init(); }
PV_API nvmlReturn_t nvmlInit(void) { return init(); }
PV_API nvmlReturn_t nvmlInitWithFlags(unsigned flags)
{
    (void)flags;                               /* NO_GPUS / NO_ATTACH: there is nothing to attach here */
    return init();
}

/* Balanced with the inits, as NVML's reference count. */
PV_API nvmlReturn_t nvmlShutdown(void)
{
    int n = atomic_load(&inits);
    do {
        if (n <= 0)
            return NVML_ERROR_UNINITIALIZED;
    } while (!atomic_compare_exchange_weak(&inits, &n, n - 1));
    return NVML_SUCCESS;
}

static const struct { nvmlReturn_t code; const char *text; } errors[] = {
    { NVML_SUCCESS, "Success" },
    { NVML_ERROR_UNINITIALIZED, "Uninitialized" },
    { NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument" },
    { NVML_ERROR_NOT_SUPPORTED, "Not Supported" },
    { NVML_ERROR_NOT_FOUND, "Not Found" },
    { NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size" },
    { NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded" },
    { NVML_ERROR_GPU_IS_LOST, "GPU is lost" },
    { NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument version mismatch" },
    { NVML_ERROR_UNKNOWN, "Unknown Error" },
};

PV_API const char *nvmlErrorString(nvmlReturn_t r)
{
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
        if (errors[i].code == r)
            return errors[i].text;
    return "Unknown Error";
}

/* A string into the caller's buffer of `len` bytes. */
static nvmlReturn_t put(char *buf, unsigned len, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t ready(void) { return atomic_load(&inits) > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED; }

PV_API nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    nvmlReturn_t r = ready();
    return r == NVML_SUCCESS ? put(buf, len, DRIVER_VERSION) : r;
}

PV_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned len) { return put(buf, len, NVML_VERSION); }

PV_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = 13000;
    return NVML_SUCCESS;
}

PV_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

/* ------------------------------------------------------------------------------------------ devices */
PV_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count)
{
    nvmlReturn_t r = count ? ready() : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *count = (unsigned)pv_device_count();
    return r;
}

PV_API nvmlReturn_t nvmlDeviceGetCount(unsigned *count) { return nvmlDeviceGetCount_v2(count); }

PV_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *out)
{
    nvmlReturn_t r = out ? ready() : NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        return r;
    if (index >= (unsigned)pv_device_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = &handles[index];
    return NVML_SUCCESS;
}

PV_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t *out)
{
    return nvmlDeviceGetHandleByIndex_v2(index, out);
}

/* The core's device of a handle, or NVML's answer to a bad one. */
static nvmlReturn_t device_of(nvmlDevice_t h, struct pv_device **d)
{
    nvmlReturn_t r = ready();
    if (r != NVML_SUCCESS)
        return r;
    if (!h || h < handles || h >= handles + PV_MAX_DEVICES || h->magic != PV_NVML_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = pv_device(h->index);
    return *d ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* NVML's UUID text: GPU- and the 16 bytes as 8-4-4-4-12 hex digits. */
static void uuid_text(const struct pv_device *d, char out[80])
{
    const unsigned char *u = d->uuid;
    snprintf(out, 80, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
             u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

PV_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned len)
{
    struct pv_device *d;
    nvmlReturn_t r = device_of(h, &d);
    return r == NVML_SUCCESS ? put(name, len, d->name) : r;
}

PV_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned len)
{
    struct pv_device *d;
    char text[80];
    nvmlReturn_t r = device_of(h, &d);
    if (r != NVML_SUCCESS)
        return r;
    uuid_text(d, text);
    return put(uuid, len, text);
}

PV_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out)
{
    nvmlReturn_t r = uuid && out ? ready() : NVML_ERROR_INVALID_ARGUMENT;
    char text[80];
    for (int i = 0; r == NVML_SUCCESS && i < pv_device_count(); i++) {
        uuid_text(pv_device(i), text);
        if (strcasecmp(text, uuid) == 0) {
            *out = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return r == NVML_SUCCESS ? NVML_ERROR_NOT_FOUND : r;
}

/* The snapshot's "dddd:bb:dd.f" as NVML's numbers. */
static void pci_of(const struct pv_device *d, unsigned *domain, unsigned *bus, unsigned *dev)
{
    *domain = *bus = *dev = 0;
    if (sscanf(d->pci_id, "%x:%x:%x", domain, bus, dev) != 3)
        *domain = *bus = *dev = 0;
}

PV_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    struct pv_device *d;
    nvmlReturn_t r = pci ? device_of(h, &d) : NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        return r;
    memset(pci, 0, sizeof *pci);
    pci_of(d, &pci->domain, &pci->bus, &pci->device);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0", pci->domain & 0xffff, pci->bus,
             pci->device);
    snprintf(pci->busId, sizeof pci->busId, "%08x:%02x:%02x.0", pci->domain, pci->bus, pci->device);
    return NVML_SUCCESS;   /* pciDeviceId, pciSubSystemId: unknown (0) for a GPU behind a daemon */
}

/* By NVML's bus id ("00000000:bb:dd.0") or the legacy and CUDA forms ("0000:bb:dd.0"): by the numbers. */
PV_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *out)
{
    unsigned dom, bus, dev;
    nvmlReturn_t r = bus_id && out ? ready() : NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        return r;
    if (sscanf(bus_id, "%x:%x:%x", &dom, &bus, &dev) != 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < pv_device_count(); i++) {
        unsigned a, b, c;
        pci_of(pv_device(i), &a, &b, &c);
        if (a == dom && b == bus && c == dev) {
            *out = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

PV_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *out)
{
    return nvmlDeviceGetHandleByPciBusId_v2(bus_id, out);
}

PV_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned *index)
{
    struct pv_device *d;
    nvmlReturn_t r = index ? device_of(h, &d) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *index = (unsigned)d->index;
    return r;
}

/* Peer access between two GPUs (NCCL asks at start-up): GPUs of one daemon that the daemon lets use each other's
 * memory (the snapshot's peers, as cudaDeviceCanAccessPeer answers) read, write and do atomics over it; NVLink and
 * GPUs of different daemons: not supported. */
enum { P2P_READ, P2P_WRITE, P2P_NVLINK, P2P_ATOMICS, P2P_PCI, P2P_UNKNOWN };
enum { P2P_STATUS_OK = 0, P2P_STATUS_NOT_SUPPORTED = 5 };
PV_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t h1, nvmlDevice_t h2, int index, int *status)
{
    struct pv_device *a, *b;
    nvmlReturn_t r = status && index >= P2P_READ && index < P2P_UNKNOWN ? device_of(h1, &a) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = device_of(h2, &b);
    if (r != NVML_SUCCESS)
        return r;
    int peers = a != b && a->conn == b->conn && b->remote < 64 && (a->peers >> b->remote & 1);
    *status = peers && index != P2P_NVLINK ? P2P_STATUS_OK : P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

PV_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned *minor) { return nvmlDeviceGetIndex(h, minor); }

PV_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor)
{
    struct pv_device *d;
    nvmlReturn_t r = major && minor ? device_of(h, &d) : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *major = d->major;
        *minor = d->minor;
    }
    return r;
}

/* ------------------------------------------------------------------------------------------ memory, load */
static nvmlReturn_t usage_of(nvmlDevice_t h, const void *arg, struct pv_usage *u)
{
    struct pv_device *d;
    nvmlReturn_t r = arg ? device_of(h, &d) : NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        return r;
    cudaError_t err = pv_device_usage(d, u);
    return err == PV_SUCCESS ? NVML_SUCCESS : err == PV_ERR_UNAVAILABLE ? NVML_ERROR_GPU_IS_LOST : NVML_ERROR_UNKNOWN;
}

PV_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
    struct pv_usage u;
    nvmlReturn_t r = usage_of(h, m, &u);
    if (r == NVML_SUCCESS)
        *m = (nvmlMemory_t){ u.total, u.free, u.used };
    return r;
}

PV_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m)
{
    struct pv_usage u;
    if (m && m->version != PV_NVML_MEMORY_V2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t r = usage_of(h, m, &u);
    if (r == NVML_SUCCESS)
        *m = (nvmlMemory_v2_t){ PV_NVML_MEMORY_V2, u.total, 0, u.free, u.used };
    return r;
}

/* gpu: the share of the last second the device ran work (every session's); memory: not measured here (0). */
PV_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *util)
{
    struct pv_usage u;
    nvmlReturn_t r = usage_of(h, util, &u);
    if (r == NVML_SUCCESS)
        *util = (nvmlUtilization_t){ (unsigned)(u.busy * 100.0 + 0.5), 0 };
    return r;
}
