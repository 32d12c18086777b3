/* cli_opts.h — the command-line options of bin/m3-ref and bin/m3-gpu: one
 * parser for the commands of both programs, so that an option is spelt,
 * checked and reported the same way in each.
 *
 * A command names the option groups it takes (a mask of M3_CLI_*);
 * m3_cli_parse fills an m3_cli_opts from its arguments and reports the
 * first misuse in an m3_err, which the program prints with its own usage
 * hint (this file never prints). Always taken: --help (-h), --model DIR,
 * --lenient-config, --quiet (-q). Values are checked here: integers are
 * plain decimal digits in range, numbers finite, --dtype fp32 or bf16,
 * --dump and --video not empty. Which prompt options go together is
 * ref/prompt.h's rule (m3_cli_prompt_check). Messages name the option and
 * the value, e.g. "--top-p needs a number in (0, 1] (got '2')".
 *
 * Spec: M3-SAMPLE-1 (--temperature 0 is greedy; a positive one below
 * M3_SAMPLE_MIN_TEMPERATURE is refused: logit / T would overflow);
 * M3-CHAT-* and M3-VIS-PLACE-1/2 through ref/prompt.h.
 */
#ifndef M3_CLI_OPTS_H
#define M3_CLI_OPTS_H

#include <stdint.h>

#include "err.h"
#include "prompt.h"

#define M3_CLI_MAX_IMAGES 64  /* --image options of one command */
#define M3_CLI_MAX_PROMPTS 64 /* --tokens / --prompt of one batch */

/* Option groups a command takes. */
enum {
    M3_CLI_TOKENS = 1,         /* --tokens IDS */
    M3_CLI_PROMPT = 2,         /* --prompt TEXT, --chat, --system TEXT, --thinking MODE */
    M3_CLI_DUMP = 4,           /* --dump OUT.safetensors */
    M3_CLI_DTYPE = 8,          /* --dtype fp32|bf16 */
    M3_CLI_GEN = 16,           /* --max-new-tokens, --greedy, --temperature, --top-p, --top-k,
                                  --seed, --draft, --spec-tokens, --print-ids */
    M3_CLI_VISION = 32,        /* --image, --video, --fps, --pixels, --vision-joint */
    M3_CLI_CASE = 64,          /* --case DIR (also the model when --model is absent) */
    M3_CLI_STRICT = 128,       /* --strict */
    M3_CLI_CONVERSATION = 256, /* --conversation FILE */
    M3_CLI_BATCH = 512,        /* --tokens / --prompt repeatable: the prompts of a batch */
    M3_CLI_TEACHER = 1024,     /* --teacher-forced GOLDEN */
    M3_CLI_CHUNKS = 2048,      /* --chunks N1,N2,... (prefill in pieces, continuing the caches) */
    M3_CLI_STREAM = 4096,      /* --stream-weights (layer weights streamed to the device) */
    M3_CLI_CONTINUE = 8192,    /* --max-new-tokens N alone: a greedy continuation in the dump */
    M3_CLI_EXACT = 16384       /* --exact-kernels (the GPU's bitwise-as-ref kernel modes) */
};

/* The parsed options; zero / NULL means "not given" unless said. */
typedef struct m3_cli_opts {
    const char *model;
    const char *tokens, *prompt; /* the (last) --tokens and --prompt */
    /* every --tokens / --prompt in command-line order (src_text[i]: a --prompt) */
    const char *src[M3_CLI_MAX_PROMPTS];
    int src_text[M3_CLI_MAX_PROMPTS];
    int n_src;
    const char *dump;
    const char *dtype;    /* "fp32" or "bf16" */
    long long max_new;    /* default 32 */
    int have_max_new;     /* --max-new-tokens given */
    const char *chunks;   /* --chunks, as given (m3_cli_parse_chunks) */
    int stream_weights;   /* --stream-weights */
    int exact_kernels;    /* --exact-kernels */
    int greedy;           /* --greedy, or --temperature 0 */
    int greedy_by_temp;   /* greedy came from --temperature 0 alone (a later --temperature undoes it) */
    int have_temp, have_top_p, have_top_k, have_seed;
    float temperature, top_p;
    long long top_k, seed;
    int print_ids;
    int lenient;
    int quiet;
    int strict;
    const char *case_dir;
    const char *teacher; /* --teacher-forced GOLDEN */
    int help;            /* --help seen: the rest was not parsed */
    int chat;
    const char *thinking;
    const char *system;
    const char *conversation;
    const char *images[M3_CLI_MAX_IMAGES];
    int n_images;
    const char *video;
    float fps;
    int have_fps;
    const char *pixels;
    int vision_joint;
    const char *draft;
    long long spec_k; /* default 3 */
} m3_cli_opts;

/* Parse a command's arguments argv[0..argc) with the groups in allow into o (--model
 * required unless --help; --case stands in for it). 0, or -1 with the misuse in e. */
int m3_cli_parse(int argc, char *const *argv, unsigned allow, m3_cli_opts *o, m3_err *e);

/* o's prompt options as ref/prompt.h takes them. */
m3_prompt_opts m3_cli_prompt_opts(const m3_cli_opts *o);

/* m3_prompt_check of o's prompt options: 0, or -1 with the problem in e. */
int m3_cli_prompt_check(const m3_cli_opts *o, m3_err *e);

/* 1 when o asks for an image, a video or pixels. */
int m3_cli_vision_requested(const m3_cli_opts *o);

/* 1 when o->dtype is bf16. */
int m3_cli_bf16(const m3_cli_opts *o);

/* A token id list (ref/tokens.h: ids separated by commas and/or blanks, each
 * in [0, INT32_MAX]) into a fresh array *out [*n]; -1 with the reason in e. */
int m3_cli_parse_tokens(const char *s, int32_t **out, int *n, m3_err *e);

/* --chunks S for a prompt of T tokens: positive sizes summing to T into a fresh
 * array *out [*n]; -1 with the reason in e. */
int m3_cli_parse_chunks(const char *s, int T, int **out, int *n, m3_err *e);

/* Whole-string integer in [lo, hi] (optional '-' when lo < 0, then decimal
 * digits); 0 ok, -1 bad. */
int m3_cli_parse_ll(const char *s, long long lo, long long hi, long long *out);

/* Whole-string finite number of magnitude <= 3e38, rounded to float; 0 ok, -1 bad. */
int m3_cli_parse_float(const char *s, float *out);

#endif
