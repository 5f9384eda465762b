/*
 * trace.h - the step timeline in the Chrome trace event format
 * (TIER_TRACE=path.json), which Perfetto and chrome://tracing open.
 *
 * The optimizer records one span per shard and stage (NVMe read,
 * host-to-device, CPU or GPU update, device-to-host, NVMe write) and one
 * span per step; trace_close() writes them as complete ("X") events, one
 * track per shard.  Spans of one shard may overlap in time (a write-back
 * of step t still running when step t+1 updates the shard), so at close
 * each shard's spans are laid out over as few tracks as keep every track's
 * spans disjoint (interval partitioning): on every track, spans sorted by
 * start never overlap, which is what "properly nested" needs.  Step spans
 * are on their own track (tid 0); the partitioned optimizer's collectives
 * (TRACE_COMM, one span per parameter and collective) on the tracks after
 * it ("collectives").
 *
 * Internal to the library (runtime/ and prefetch/).  Every function is
 * thread-safe, and trace_span() may be called with other locks held (the
 * store's event hook): it takes only the trace's own mutex, allocates
 * amortised, and never does I/O.  A NULL trace ignores every call.
 */
#ifndef TIER_FORMATS_TRACE_H
#define TIER_FORMATS_TRACE_H

#include <stdint.h>

enum trace_stage {
	TRACE_STEP = 0,      /* one optimizer step: begin to end */
	TRACE_NVME_READ,     /* NVMe -> DRAM fill of a shard */
	TRACE_H2D,           /* DRAM -> HBM fill */
	TRACE_UPDATE_CPU,    /* the CPU kernel over the shard */
	TRACE_UPDATE_GPU,    /* the HBM-tier kernel over the shard */
	TRACE_D2H,           /* HBM -> DRAM write-back */
	TRACE_NVME_WRITE,    /* DRAM -> NVMe write-back */
	TRACE_STALL,         /* the update waited for the shard's state */
	TRACE_STAGING,       /* the GPU lane's CPU copy of the shard's pageable
			      * gradient into pinned staging, or of its staged
			      * output into the trainer's buffer */
	TRACE_GRAD_IN,       /* the GPU lane: a host gradient's copy into the
			      * slot's device buffer, queued to done */
	TRACE_KERNEL,        /* the GPU lane: the update kernel on the slot's
			      * stream, from the gradient's arrival to its end */
	TRACE_OUT,           /* the GPU lane: a host output's copy from the
			      * slot's device buffer, kernel's end to done */
	TRACE_COMM,          /* a collective of the partitioned optimizer, post
			      * to completion; @shard is its parameter */
	TRACE__STAGES
};

struct trace;

/*
 * A trace that trace_close() writes to @path.  The file is created (and
 * truncated) now, so a bad path fails here: -errno with the path in the
 * detail.  At most @max_spans spans are kept (0: 4 Mi); later ones are
 * counted and dropped, and the file says how many.
 */
int trace_open(const char *path, uint64_t max_spans, struct trace **out);

/* Names shard lane @shard (0-based) in the viewer: "layer.3#2". */
void trace_name_shard(struct trace *t, uint32_t shard, const char *name);

/*
 * Records a span of @stage for @shard (ignored for TRACE_STEP) from
 * @begin_ns to @end_ns (ts_now_ns() clock; end < begin is clamped to
 * begin), in optimizer step @step, moving @bytes (0 when not a transfer).
 */
void trace_span(struct trace *t, enum trace_stage stage, uint32_t shard, uint64_t step,
		uint64_t begin_ns, uint64_t end_ns, uint64_t bytes);

/* The stage's name in the file: "step", "nvme_read", "h2d", "update_cpu",
 * "update_gpu", "d2h", "nvme_write", "stall", "staging", "grad_in",
 * "kernel_gpu", "out_d2h", "comm". */
const char *trace_stage_name(enum trace_stage stage);

/*
 * Writes the JSON ({"traceEvents": [...], "displayTimeUnit": "ms",
 * "otherData": {...}}: process and thread name metadata, then the spans
 * with ts and dur in microseconds from the first span) and frees @t.  0 or
 * -errno (the detail names the file).  NULL: 0.
 */
int trace_close(struct trace *t);

#endif
