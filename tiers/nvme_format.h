/*
 * nvme_format.h - the header at the start of every NVMe backing file
 * (docs/nvme-format.md).  Little-endian, 4096 bytes, written with O_DIRECT
 * alignment; the last 4 bytes are a crc32c of the rest.  It lets a later
 * open recognise the file as ours, check that the set of files belongs to
 * one store, and refuse a file written by another format version.
 */
#ifndef TIER_TIERS_NVME_FORMAT_H
#define TIER_TIERS_NVME_FORMAT_H

#include <stdint.h>

#define TIER_NVME_MAGIC "TIERNVME"   /* 8 bytes, no NUL */
#define TIER_NVME_FORMAT_VERSION 1
#define TIER_NVME_HEADER_SIZE 4096

struct ts_nvme_header {
	char magic[8];            /* "TIERNVME" */
	uint32_t version;         /* TIER_NVME_FORMAT_VERSION */
	uint32_t header_size;     /* 4096 */
	uint8_t store_uuid[16];   /* the same in every file of one store */
	char store_name[64];      /* NUL-padded; no NUL when 64 long */
	uint32_t path_index;      /* this file's place in the stripe */
	uint32_t npaths;          /* files in the stripe */
	uint32_t stripe_unit;     /* bytes */
	uint32_t block_size;      /* transfer alignment of this file */
	uint64_t data_offset;     /* file offset of the data area */
	uint64_t capacity;        /* bytes in the data area */
	uint32_t checksum;        /* 0 none, 1 crc32c per stripe unit */
	uint32_t flags;           /* TIER_NVME_HDR_* */
	uint64_t created_ns;      /* CLOCK_REALTIME at creation */
	uint64_t closed_ns;       /* CLOCK_REALTIME at the last clean close */
	uint32_t owner_pid;       /* the process that last wrote the header (0: unknown) */
	uint32_t reserved0;
	uint8_t reserved[TIER_NVME_HEADER_SIZE - 164];
	uint32_t header_crc;      /* crc32c of the bytes before it */
};

_Static_assert(sizeof(struct ts_nvme_header) == TIER_NVME_HEADER_SIZE,
	       "the header is one 4 KiB block");

#define TIER_NVME_HDR_CLEAN 1u      /* closed cleanly */
#define TIER_NVME_HDR_SCRATCH 2u    /* made by a scratch store, which removes it at close */

/* Fills the crc; the header is then ready to write. */
void nvme_header_seal(struct ts_nvme_header *h);

/*
 * Checks magic, version, size and crc.  0, -ENOMSG (not a tierstore file:
 * no magic), -EPROTO (a tierstore file of another format version), or
 * -EBADMSG (damaged: crc mismatch), with the detail message naming @file.
 */
int nvme_header_check(const struct ts_nvme_header *h, const char *file);

#endif
