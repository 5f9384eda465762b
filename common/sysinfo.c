/*
 * sysinfo.c - machine facts from /proc, /sys, statvfs and libnuma.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <numa.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fault.h"
#include "common/sysinfo.h"

int sys_meminfo(struct ts_meminfo *out)
{
	char line[256];
	bool have_total = false, have_avail = false;
	FILE *f;
	int rc;

	rc = ts_fault_check(TIER_FAULT_MEMINFO);
	if (rc)
		return ts_err(rc, "/proc/meminfo: %s", tier_strerror(rc));
	f = fopen("/proc/meminfo", "re");
	if (!f)
		return ts_err(-errno, "/proc/meminfo: %s", tier_strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;

		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
			out->total = kb * 1024ull;
			have_total = true;
		} else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
			out->available = kb * 1024ull;
			have_avail = true;
		}
	}
	fclose(f);
	if (!have_total || !have_avail)
		return ts_err(-EIO, "/proc/meminfo: no MemTotal or MemAvailable line");
	return 0;
}

static uint32_t dev_logical_block_size(dev_t dev)
{
	char path[128];
	unsigned v = 0;
	FILE *f;

	/* A partition has no queue/ of its own: its parent disk's applies. */
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/queue/logical_block_size",
		 major(dev), minor(dev));
	f = fopen(path, "re");
	if (!f) {
		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/../queue/logical_block_size",
			 major(dev), minor(dev));
		f = fopen(path, "re");
	}
	if (!f)
		return 0;
	if (fscanf(f, "%u", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

int sys_fsinfo(const char *path, struct ts_fsinfo *out)
{
	struct statvfs vfs;
	struct stat st;
	int rc;

	rc = ts_fault_check(TIER_FAULT_STATVFS);
	if (rc)
		return ts_err(rc, "%s: statvfs: %s", path, tier_strerror(rc));
	if (statvfs(path, &vfs) != 0)
		return ts_err(-errno, "%s: statvfs: %s", path, tier_strerror(errno));
	if (stat(path, &st) != 0)
		return ts_err(-errno, "%s: stat: %s", path, tier_strerror(errno));
	out->size = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	out->avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	out->dev = st.st_dev;
	out->lbs = dev_logical_block_size(st.st_dev);
	return 0;
}

static _Atomic unsigned g_probe_seq;

int sys_direct_probe(const char *dir)
{
	char path[PATH_MAX];
	int fd, rc;

	rc = ts_fault_check(TIER_FAULT_DIRECT_PROBE);
	if (rc)
		return ts_err(rc, "%s: O_DIRECT probe: %s", dir, tier_strerror(rc));
	/* Unique per process, thread and call: probes may run concurrently. */
	if (snprintf(path, sizeof(path), "%s/.tierstore-direct-probe-%d-%d-%u", dir,
		     (int)getpid(), (int)gettid(),
		     atomic_fetch_add_explicit(&g_probe_seq, 1, memory_order_relaxed)) >=
	    (int)sizeof(path))
		return ts_err(-ENAMETOOLONG, "%s: path too long", dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		if (rc == -EINVAL)
			return ts_err(rc, "%s: the file system refuses O_DIRECT", dir);
		return ts_err(rc, "%s: O_DIRECT probe: %s", dir, tier_strerror(rc));
	}
	close(fd);
	unlink(path);
	return 0;
}

int sys_numa_max_node(void)
{
	if (numa_available() < 0)
		return 0;
	return numa_max_node();
}

bool sys_numa_node_valid(int node)
{
	if (node < 0)
		return false;
	if (numa_available() < 0)
		return node == 0;
	if (node > numa_max_node())
		return false;
	return numa_node_size64(node, NULL) > 0;
}

int sys_pci_numa_node(const char *bus_id)
{
	char path[256], id[64];
	int node = -1;
	FILE *f;

	/* sysfs names PCI devices in lower case; CUDA prints upper case. */
	snprintf(id, sizeof(id), "%s", bus_id);
	for (char *p = id; *p; p++)
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", id);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &node) != 1)
		node = -1;
	fclose(f);
	return node;
}

void sys_hugeinfo(struct ts_hugeinfo *out)
{
	char line[256];
	FILE *f;

	memset(out, 0, sizeof(*out));
	f = fopen("/proc/meminfo", "re");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			unsigned long long v;

			if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1)
				out->page_size = v * 1024ull;
			else if (sscanf(line, "HugePages_Free: %llu", &v) == 1)
				out->free_pages = v;
		}
		fclose(f);
	}
	f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
	if (f) {
		if (fgets(line, sizeof(line), f))
			out->thp = strstr(line, "[always]") || strstr(line, "[madvise]");
		fclose(f);
	}
}

ssize_t sys_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}
