/* fuzz_synth_args.c — the synth command's arguments (m3-conform synth ...) through
 * cf_synth_parse_args: the input is split at newlines into at most 32 arguments. An
 * accepted set must satisfy every range of M3-SYNTH-1; nothing is written. */
#include "common.h"
#include "synth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = m3fuzz_strndup(data, size);
    if (!s)
        return 0;
    char *argv[32];
    int argc = 0;
    for (char *p = s; argc < 32;) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    cf_synth_opts o;
    m3_err e;
    int help = 0;
    if (cf_synth_parse_args(&o, argc, argv, &help, &e) == 0 && !help) {
        if (o.layers < 1 || o.layers > CF_SYNTH_MAX_LAYERS || o.dense_layers < 0 ||
            o.dense_layers > o.layers || o.vocab < CF_SYNTH_MIN_VOCAB || o.vocab > CF_SYNTH_VOCAB ||
            o.vision_layers < 0 || o.vision_layers > CF_SYNTH_MAX_VISION_LAYERS || o.prompt_len < 1 ||
            o.prompt_len > CF_SYNTH_MAX_PROMPT || o.shard_bytes < CF_SYNTH_MIN_SHARD || !o.out || !*o.out)
            abort();
    }
    free(s);
    return 0;
}
