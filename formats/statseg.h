/*
 * statseg.h - the stats segment: a small shared-memory file through which
 * a running store publishes its counters to tier-stat.
 *
 * A segment is the file DIR/tierstore-PID-N.stats (DIR: $TIER_STATS_DIR,
 * else /dev/shm; N a per-process counter), mode 0600, owned by the
 * process's uid, mapped shared.  Its layout (below) is the protocol: a
 * fixed header, a seqlock-protected data area (a sequence word, then a
 * payload whose size and meaning the creator chooses) and the manifest
 * text.  One writer publishes whole payloads; any number of readers, in
 * any process of the same uid, copy consistent snapshots and never block
 * the writer.  docs/tier-stat.md ("The stats segment") describes the
 * protocol for readers written elsewhere.
 *
 * Internal to the library and its tools (runtime/publish.c publishes a
 * store's counters through it).
 * Every int-returning function returns 0 or a negative errno, with the
 * detail message (tier_last_error()) naming the file.
 */
#ifndef TIER_FORMATS_STATSEG_H
#define TIER_FORMATS_STATSEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STATSEG_MAGIC "TIERSTAT"          /* 8 bytes, no NUL in the file */
#define STATSEG_VERSION 2u                /* = TIER_LIVE_VERSION (runtime/publish.c) */
#define STATSEG_NAME_MAX 64               /* name[] bytes, NUL included */
#define STATSEG_BOOT_ID_MAX 40            /* boot_id[] bytes, NUL included */
#define STATSEG_MAX_SIZE (64ull << 20)    /* a reader refuses bigger files */

/*
 * The header, at offset 0.  Host byte order, which is little-endian on
 * every machine the library builds for (checked at compile time); all
 * fields have explicit widths, and none is a pointer.  Written once by
 * statseg_create() before the file gets its public name, then read-only.
 */
struct statseg_header {
	char magic[8];             /* "TIERSTAT" */
	uint32_t version;          /* STATSEG_VERSION */
	uint32_t header_size;      /* sizeof(struct statseg_header) */
	uint64_t total_size;       /* the file's size */
	uint64_t pid;              /* the writer's process */
	uint64_t uid;              /* its effective uid, the file's owner */
	uint64_t start_ns;         /* creation time, CLOCK_REALTIME ns */
	uint64_t proc_start;       /* the writer's start time, field 22 of
				    * /proc/PID/stat (ticks since boot); 0 if
				    * unknown.  Tells a recycled PID apart. */
	char boot_id[STATSEG_BOOT_ID_MAX]; /* /proc/sys/kernel/random/boot_id,
				    * NUL-terminated; "" if unknown */
	char name[STATSEG_NAME_MAX];       /* the creator's name, NUL-terminated */
	uint32_t manifest_len;     /* manifest bytes, without its NUL */
	uint32_t flags;            /* STATSEG_F_*; 0 from a writer before them
				    * (the field was "reserved, 0") */
	uint64_t seq_offset;       /* the sequence word (8-byte aligned) */
	uint64_t payload_offset;   /* the payload (8-byte aligned) */
	uint64_t payload_size;     /* a multiple of 8 */
	uint64_t manifest_offset;  /* manifest text, then a NUL */
};

/*
 * flags: a struct statseg_rank follows the header, at header_size (in the
 * room before the sequence word, which readers without the flag skip: the
 * layout version and header_size stay as they were).
 */
#define STATSEG_F_RANK 1u

/* The writer's place in a distributed job (struct tier_rank). */
struct statseg_rank {
	int32_t rank, local_rank, world_size, local_world_size;
};

/*
 * The data area's protocol (a seqlock): the sequence word is even while
 * the payload is stable and odd while the writer rewrites it; it grows by
 * 2 per publish (0: nothing published yet, payload all zero).  The writer
 * makes it odd, stores the payload, makes it even again; a reader takes
 * the sequence (acquire), copies the payload, and keeps the copy only if
 * the sequence was even and has not changed.  The payload is stored and
 * loaded in aligned 8-byte atomic words (release stores, acquire loads).
 */

/* ------------------------------------------------------------ the writer */

struct statseg;

/*
 * Creates a segment in statseg_dir() named @name (cut to 63 bytes;
 * NULL: ""), with @payload_size bytes of payload (a multiple of 8, at
 * least 8; all zero until the first publish) and a copy of
 * @manifest_text (NULL: "").  The file is complete before it appears
 * under its public name, so a reader never sees a half-written header.
 * Its every byte is allocated before it is mapped, so neither this call
 * nor a later publish can fault on a full file system: a file system
 * without room for it fails the call (-ENOSPC, the detail saying what was
 * free) and no file is left.  -EINVAL for a bad size, -errno of the file
 * system (the detail names the path), -ENOMEM.
 */
int statseg_create(const char *name, const char *manifest_text, size_t payload_size,
		   struct statseg **out);
/* statseg_create() with the writer's @rank in the header (NULL: none). */
int statseg_create_rank(const char *name, const char *manifest_text, size_t payload_size,
			const struct statseg_rank *rank, struct statseg **out);

/*
 * Publishes @payload (payload_size bytes, any alignment).  One writer at a
 * time: calls on one segment must not overlap (the caller serialises
 * them).  Never blocks, never fails; costs a copy of the payload.
 */
void statseg_publish(struct statseg *s, const void *payload);

/* The file's path and the payload size it was created with. */
const char *statseg_path(const struct statseg *s);
size_t statseg_payload_size(const struct statseg *s);

/*
 * Unmaps and removes the segment, and frees @s.  A forked child closing
 * its inherited copy unmaps it but leaves the parent's file alone.  NULL:
 * no-op.
 */
void statseg_close(struct statseg *s);

/* ------------------------------------------------------------ the reader */

struct statseg_view;

/*
 * Opens the segment at @path for reading after checking it: a regular
 * file (not a symlink), owned by the caller's uid with mode 0600 (-EACCES
 * otherwise), of a sane size and with a consistent header (-EBADMSG: not
 * a stats segment, or a corrupt one), in layout STATSEG_VERSION (-EPROTO
 * for another version).  -errno of open() or read() (-ENOENT: no such
 * segment).  The detail names the path and the reason.  Nothing is
 * mapped: the view keeps a copy of the file as it was (header, rank,
 * manifest) and its descriptor, through which statseg_read() reads the
 * data area; so a file cut short by someone else never raises SIGBUS.
 */
int statseg_open(const char *path, struct statseg_view **out);

/*
 * Copies a consistent snapshot of the first @len bytes of the payload
 * (@len <= payload size, else -EINVAL) into @payload.  Retries while the
 * writer is publishing; -EAGAIN when no consistent copy was had after a
 * bounded number of tries (a writer publishing nonstop, or one that died
 * in the middle of a publish).  -EBADMSG when the file is now shorter
 * than at open ("stats segment 'PATH' shrank to N bytes (want M): the
 * store was closed or damaged"): the size is checked before each read,
 * and a read that comes back short says the same.  Never blocks the
 * writer.
 */
int statseg_read(const struct statseg_view *v, void *payload, size_t len);

/* The validated header, and the manifest text (NUL-terminated), from the
 * view's copy: valid until statseg_view_close(), whatever becomes of the
 * file. */
const struct statseg_header *statseg_view_header(const struct statseg_view *v);
const char *statseg_view_manifest(const struct statseg_view *v);
/* The writer's rank into *@out: false when the segment has none (an
 * older writer). */
bool statseg_view_rank(const struct statseg_view *v, struct statseg_rank *out);
const char *statseg_view_path(const struct statseg_view *v);

/*
 * Whether the writer is gone: its pid no longer exists, or belongs to a
 * process with another start time (a recycled pid), or the machine has
 * rebooted since (another boot id).  A stale segment stays until someone
 * removes it (tier-stat, when asked).
 */
bool statseg_stale(const struct statseg_view *v);

void statseg_view_close(struct statseg_view *v);

/* ------------------------------------------------------------- the files */

/* $TIER_STATS_DIR when set and not empty, else "/dev/shm". */
const char *statseg_dir(void);

/*
 * Calls @cb(path, arg) for each file named tierstore-*.stats in @dir
 * (NULL: statseg_dir()), in name order, without opening them.  Stops at
 * the first nonzero return of @cb and returns it; otherwise 0, or -errno
 * when the directory cannot be read (the detail names it).
 */
int statseg_list(const char *dir, int (*cb)(const char *path, void *arg), void *arg);

#endif
