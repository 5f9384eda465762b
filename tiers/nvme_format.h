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

#include "tiers/tiers_cfg.h"

#define TIER_NVME_MAGIC "TIERNVME"   /* 8 bytes, no NUL */
#define TIER_NVME_FORMAT_VERSION 2
#define TIER_NVME_HEADER_SIZE 4096
/* Path 0 holds two commit slots after its header (docs/nvme-format.md,
 * "Commits"); every file leaves the room, and the data area starts after
 * them, on the allocation alignment. */
#define TIER_NVME_SLOT_OFF(i) (TIER_NVME_HEADER_SIZE * (1u + (unsigned)(i)))
#define TIER_NVME_META_END (3u * TIER_NVME_HEADER_SIZE)

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
/* Written by a build that holds every extent of every kept commit while
 * the store is open.  An earlier build held only the newest commit's, and
 * its writes may have reused extents that only older kept commits name:
 * a path 0 header without this bit makes those commits suspect. */
#define TIER_NVME_HDR_HOLDS_KEPT 4u

/* Fills the crc; the header is then ready to write. */
void nvme_header_seal(struct ts_nvme_header *h);

/*
 * Checks magic, version, size and crc.  0, -ENOMSG (not a tierstore file:
 * no magic), -EPROTO (a tierstore file of another format version), or
 * -EBADMSG (damaged: crc mismatch), with the detail message naming @file.
 */
int nvme_header_check(const struct ts_nvme_header *h, const char *file);

/* ------------------------------------------------------------- commits */

#define TIER_NVME_SLOT_MAGIC "TIERCMIT"
#define TIER_NVME_TABLE_MAGIC "TIERTABL"
#define TIER_NVME_MAX_KEEP 32

/* One commit of the ring a slot holds: where its object table is. */
struct ts_nvme_commit {
	uint64_t gen;             /* generation, from 1 */
	uint64_t time_ns;         /* CLOCK_REALTIME when it was made durable */
	uint64_t table_off;       /* data-relative offset of its table on path 0 */
	uint64_t table_len;       /* bytes of the table (before the round-up to blocks) */
	uint64_t data_bytes;      /* object bytes it holds */
	uint32_t table_crc;       /* crc32c of the table's table_len bytes */
	uint32_t nobjs;
	uint64_t meta_len;        /* bytes of the user record in the table */
};

_Static_assert(sizeof(struct ts_nvme_commit) == 56, "a commit entry is 56 bytes");

/* A commit slot: the kept commits, newest first.  Written whole (4 KiB)
 * after the table and the data it names are durable; the valid slot of
 * the higher seq is the store's state. */
struct ts_nvme_slot {
	char magic[8];            /* "TIERCMIT" */
	uint32_t version;         /* TIER_NVME_FORMAT_VERSION */
	uint32_t slot_size;       /* 4096 */
	uint8_t store_uuid[16];
	uint64_t seq;             /* slot writes so far: the newer slot has the higher */
	uint64_t next_gen;        /* the generation the next commit takes */
	uint32_t ncommits;        /* entries in use, newest first */
	uint32_t keep;            /* the manifest's keep_commits when written */
	struct ts_nvme_commit c[TIER_NVME_MAX_KEEP];
	uint8_t reserved[TIER_NVME_HEADER_SIZE - 56 - 56 * TIER_NVME_MAX_KEEP - 4];
	uint32_t slot_crc;        /* crc32c of the bytes before it */
};

_Static_assert(sizeof(struct ts_nvme_slot) == TIER_NVME_HEADER_SIZE, "a slot is 4 KiB");
_Static_assert(TIER_NVME_MAX_KEEP == TIER_KEEP_COMMITS_MAX, "the manifest's limit is the slot's");

/* The object table's header; the objects, the held extents and the
 * user record follow it (docs/nvme-format.md, "The object table"). */
struct ts_nvme_table {
	char magic[8];            /* "TIERTABL" */
	uint32_t version;
	uint32_t header_size;     /* sizeof(struct ts_nvme_table) */
	uint8_t store_uuid[16];
	uint64_t gen;
	uint64_t time_ns;
	uint32_t npaths, stripe_unit;
	uint32_t checksum;        /* 0 none, 1 crc32c per stripe unit */
	uint32_t reserved0;
	uint64_t nobjs;
	uint64_t nheld;           /* extents held for older commits */
	uint64_t meta_len;
	uint64_t next_rot;
};

_Static_assert(sizeof(struct ts_nvme_table) == 96, "the table header is 96 bytes");

/* An object's entry (then ext_off[npaths], ext_len[npaths] as uint64_t, the
 * name, the crc_ok bitmap and, with checksums, a uint32_t crc per unit). */
struct ts_nvme_table_obj {
	uint64_t size;
	uint32_t rot;
	uint16_t name_len;
	uint16_t flags;           /* TIER_NVME_OBJ_* */
};

/* Fills a slot's crc; checks one: 0, -ENOENT (never written: zeros), -EBADMSG. */
void nvme_slot_seal(struct ts_nvme_slot *s);
int nvme_slot_check(const struct ts_nvme_slot *s);

#define TIER_NVME_OBJ_WRITTEN 1u  /* written at least once: its bytes are its own */

/* An extent an older kept commit still needs. */
struct ts_nvme_table_held {
	uint32_t path, reserved;
	uint64_t off, len;
	uint64_t last_gen;        /* the newest commit that names it */
};

#endif
