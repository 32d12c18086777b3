/* synth.h — shape-faithful synthetic M3 checkpoints generated from a seed
 * (bin/m3-conform synth).
 *
 * Spec: spec/synth.md, M3-SYNTH-1..12 (the tensor set and layout, the
 * counter-based generator, the per-tensor amplitudes, the bf16 rounding,
 * sharding, the exact bytes of every file written).
 *
 * The generator is a pure function of (seed, tensor name, element index), so
 * any shard, tensor or slice can be regenerated alone and in any language;
 * tools/synth_check.py does so with numpy. Writing streams through a fixed
 * buffer: memory stays bounded whatever the checkpoint's size. Every file is
 * written to a temporary name in the output directory and renamed into place.
 */
#ifndef M3_SYNTH_H
#define M3_SYNTH_H

#include <stdint.h>
#include <stdio.h>

#include "err.h"
#include "progress.h"

#define CF_SYNTH_MAX_LAYERS 60       /* the released text model's depth */
#define CF_SYNTH_VOCAB 200064        /* the released vocabulary */
#define CF_SYNTH_MIN_VOCAB 256
#define CF_SYNTH_MAX_VISION_LAYERS 32
#define CF_SYNTH_MAX_PROMPT 1048576
#define CF_SYNTH_DEFAULT_PROMPT 2600
#define CF_SYNTH_DEFAULT_SHARD 5000000000LL /* bytes of tensor data per shard, at most */
#define CF_SYNTH_MIN_SHARD 4096LL

typedef struct cf_synth_opts {
    uint64_t seed;
    int layers;          /* text layers, 1..60 */
    int dense_layers;    /* leading dense layers, 0..layers (default min(3, layers)) */
    int vocab;           /* 256..200064 */
    int vision_layers;   /* 0: no vision tower tensors; else 1..32 encoder layers */
    int prompt_len;      /* tokens of inputs.safetensors input_ids */
    long long shard_bytes;
    int tiny;            /* 1: the small test shapes of M3-SYNTH-2 instead of the released ones */
    int dry_run;         /* plan and disk check only, nothing written */
    int quiet;           /* --quiet: no progress line, no summary */
    const char *out;
} cf_synth_opts;

/* Parse the synth command's arguments argv[0..argc) (after the word "synth")
 * into o with the defaults of M3-SYNTH-1. *help is set for --help. Returns 0,
 * or -1 with e naming the option and the accepted range. */
int cf_synth_parse_args(cf_synth_opts *o, int argc, char **argv, int *help, m3_err *e);

/* The --help text of the synth command. */
void cf_synth_usage(FILE *f);

/* Write the checkpoint o describes into o->out (M3-SYNTH-10), after checking
 * up front that the disk holds it. Log lines go to log (may be NULL); the bytes
 * of the shards written are counted on pg's task (may be NULL).
 * Returns 0, or -1 with e naming the file or the need. */
int cf_synth_write(const cf_synth_opts *o, FILE *log, m3_progress *pg, m3_err *e);

/* M3-SYNTH-4: the tensor key of a tensor name under seed. */
uint64_t cf_synth_key(uint64_t seed, const char *name);

/* M3-SYNTH-4: the 64 random bits of element i of the tensor with key k. */
uint64_t cf_synth_bits(uint64_t k, uint64_t i);

/* M3-SYNTH-5: element i of a float tensor with key k, amplitude a and
 * offset o, as the fp32 value before any bf16 rounding. */
float cf_synth_value(uint64_t k, uint64_t i, float a, float o);

#endif
