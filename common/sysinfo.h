/*
 * sysinfo.h - facts about this machine that the manifest is checked
 * against: memory, file systems, O_DIRECT support, NUMA nodes, PCI devices,
 * huge pages.  Each query goes through a fault site so tests can make it
 * fail.
 */
#ifndef TIER_COMMON_SYSINFO_H
#define TIER_COMMON_SYSINFO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct ts_meminfo {
	uint64_t total;      /* MemTotal */
	uint64_t available;  /* MemAvailable */
};

/* Reads /proc/meminfo.  0, or -errno with the detail message set. */
int sys_meminfo(struct ts_meminfo *out);

struct ts_fsinfo {
	uint64_t size;       /* file system size, bytes */
	uint64_t avail;      /* bytes available to an unprivileged writer */
	dev_t dev;           /* the file system's device */
	uint32_t lbs;        /* logical block size of the device, or 0 if unknown */
};

/* statvfs() and stat() of @path (a directory or file). */
int sys_fsinfo(const char *path, struct ts_fsinfo *out);

/* pread() of @len bytes of @fd at @off into @buf, again after EINTR and a
 * short read: the bytes read (fewer than @len at the end of the file), or
 * -errno.  Sets no detail message. */
ssize_t sys_pread_full(int fd, void *buf, size_t len, uint64_t off);

/*
 * Whether O_DIRECT works in directory @dir: creates and removes a probe
 * file there.  0 = works, -EINVAL = the file system refuses O_DIRECT,
 * other -errno = the probe itself failed (detail message set).
 */
int sys_direct_probe(const char *dir);

/* Highest NUMA node number (0 on a machine without NUMA). */
int sys_numa_max_node(void);
/* Whether @node is a NUMA node with memory. */
bool sys_numa_node_valid(int node);
/* The NUMA node of PCI device @bus_id ("0000:17:00.0"), or -1. */
int sys_pci_numa_node(const char *bus_id);

struct ts_hugeinfo {
	uint64_t page_size;  /* default huge page size, bytes (0: none) */
	uint64_t free_pages; /* free pre-allocated huge pages of that size */
	bool thp;            /* transparent huge pages: always or madvise */
};
void sys_hugeinfo(struct ts_hugeinfo *out);

#endif
