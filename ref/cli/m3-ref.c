/* m3-ref — command-line front end of the m3 reference interpreter.
 *
 *   m3-ref forward  --model DIR (--tokens IDS | --prompt TEXT [--chat ...]) [--dtype fp32|bf16]
 *                   [--dump OUT.safetensors]
 *                   [vision inputs]
 *   m3-ref generate --model DIR (--tokens IDS | --prompt TEXT [--chat ...]) [--max-new-tokens N]
 *                   [--greedy | --temperature T --top-p P --top-k K --seed S]
 *                   [--draft DIR --spec-tokens K] [--print-ids] [--dtype fp32|bf16]
 *                   [vision inputs]
 *   m3-ref inspect  --model DIR
 *
 * vision inputs: --image FILE... | --video F1,F2,... --fps R | --pixels FILE, and
 * --vision-joint. Options are parsed by ref/cli_opts.h (shared with bin/m3-gpu);
 * the HELP_* texts below list every option each command accepts.
 * Every subcommand takes --help (-h), --quiet and --lenient-config. Exit status: 0 ok,
 * 1 the model or the run failed (message on stderr), 2 bad command line.
 * Only this file prints; the library reports through m3_err.
 * Progress (ref/progress.h) goes to stderr: the layer and rows of the
 * forward or prefill, tokens of the decode (when stdout is not the
 * terminal the text streams to), then a summary with the wall time and the
 * peak RSS. SIGPIPE is ignored: when the reader of stdout goes away (| head)
 * generate stops, and the exit status stays 0; other stdout write errors
 * exit 1.
 */
#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_opts.h"
#include "err.h"
#include "fileio.h"
#include "genconfig.h"
#include "inspect.h"
#include "model.h"
#include "multimodal.h"
#include "progress.h"
#include "prompt.h"
#include "tokenizer.h"
#include "tokens.h"
#include "numerics.h"
#include "safetensors.h"
#include "sampling.h"
#include "speculative.h"

#define EXIT_RUN 1
#define EXIT_USAGE 2

/* ------------------------------------------------------------------------ */
/* help texts                                                               */

static const char *HELP_MAIN =
    "usage: m3-ref <command> [options]\n"
    "\n"
    "The m3 reference interpreter for MiniMax-M3 (model_type minimax_m3_vl): the text model,\n"
    "the vision tower for image and video inputs, and Eagle3 speculative decoding.\n"
    "\n"
    "commands:\n"
    "  forward    run token ids through the model once; print a summary, optionally dump\n"
    "             every activation (embeddings, per-layer streams, block/expert choices,\n"
    "             logits) to a safetensors file\n"
    "  generate   continue a token sequence (greedy or sampled), streaming the new tokens\n"
    "  inspect    print the architecture and a parameter table of a checkpoint\n"
    "\n"
    "Run 'm3-ref <command> --help' (or -h) for the options of a command; 'm3-ref --help'\n"
    "(or -h, help) prints this text.\n"
    "Long runs show progress on stderr (one line redrawn on a terminal, a line every 30 s\n"
    "otherwise, or every M3_PROGRESS_INTERVAL seconds) and end with a summary line (wall\n"
    "time, peak RSS); --quiet turns both off.\n"
    "DIR is a checkpoint directory: config.json plus model.safetensors or a sharded\n"
    "model.safetensors.index.json (public MiniMax-M3 layout or the transformers v5 layout).\n"
    "Exit status: 0 success, 1 model or run error, 2 bad command line.\n";

static const char *HELP_FORWARD =
    "usage: m3-ref forward (--model DIR (--tokens IDS | --prompt TEXT) | --case DIR)\n"
    "                      [--dtype fp32|bf16] [--dump OUT.safetensors]\n"
    "                      [--chat [--system TEXT] [--thinking MODE]]\n"
    "                      [--image FILE]... [--video F1,F2,... --fps R] [--pixels FILE]\n"
    "                      [--vision-joint] [--strict] [--quiet] [--lenient-config]\n"
    "\n"
    "Run the T token ids through the model in one pass (positions 0..T-1) and print T and the\n"
    "top-5 entries of the last row of logits.\n"
    "\n"
    "  --model DIR            checkpoint directory (config.json + safetensors)\n"
    "  --tokens IDS           token ids separated by commas and/or spaces, e.g. 1,2,3\n"
    "                         (each id must be in [0, vocab_size); exit 2 otherwise)\n"
    "  --prompt TEXT          text instead of ids, encoded with DIR/tokenizer.json (the ids\n"
    "                         are printed first); --chat, --system, --thinking as for generate\n"
    "  --case DIR             a text model case of the conformance vectors: input_ids from\n"
    "                         DIR/inputs.safetensors, the model from DIR (unless --model),\n"
    "                         params.chunks / params.T checked against input_ids; with\n"
    "                         params.max_new_tokens N the dump also holds greedy_tokens int32\n"
    "                         [N] (N greedy steps after the prompt), as m3-conform expects.\n"
    "                         The dump is of one pass over the prompt (chunked prefill gives\n"
    "                         the same rows, M3-DUMP-2)\n"
    "  --strict               fail (exit 1) when the logits hold NaN or Inf (default: warn)\n"
    "  --dtype fp32|bf16      numeric mode (default fp32). fp32 is the golden mode: all math\n"
    "                         in fp32 on the checkpoint weights; bf16 rounds to bf16 at the\n"
    "                         points where the upstream bf16 path rounds\n"
    "  --dump OUT.safetensors write every activation for the T rows (fp32 unless said; the\n"
    "                         file is written whole and renamed into place, and may not be\n"
    "                         one of the inputs):\n"
    "                         embeddings [T,H]; layers.{i}.input, .attn_norm, .attn.output,\n"
    "                         .post_attn, .ffn_norm, .mlp.output, .output [T,H];\n"
    "                         layers.{i}.attn.block_indices int32 [G,T,K] (sparse layers);\n"
    "                         layers.{i}.moe.topk_index int32 [T,k], .moe.topk_weight [T,k],\n"
    "                         .moe.scores [T,E] (MoE layers); final_norm [T,H]; logits [T,V];\n"
    "                         eagle3.aux [T,3H] (residual streams entering layers\n"
    "                         min(2,L-1), L/2, max(L-3,0))\n"
    "  --image FILE           a PNG or JPEG for the next image marker (repeatable, in prompt\n"
    "                         order): each image marker id in the ids becomes start, N image\n"
    "                         tokens and end (N = merged 28x28 windows after smart_resize);\n"
    "                         the ids are the config's image_token_id, image_start_token_id\n"
    "                         and image_end_token_id (released values 200025, 200029, 200030)\n"
    "  --video F1,F2,...      the frames of one video (for the config's video_token_id,\n"
    "                         released 200026), with --fps R\n"
    "  --fps R                frames per second of --video (timestamps)\n"
    "  --pixels FILE          preprocessed pixel_values fp32 [N,1176] and image_grid_thw\n"
    "                         int32 [n,3] (safetensors) instead of image files\n"
    "  --vision-joint         one attention over all images (HF's behaviour, for comparisons;\n"
    "                         default: one segment per image / 4-group video segment)\n"
    "  --quiet                no progress line and no summary on stderr\n"
    "  --lenient-config       warn about unknown config.json keys instead of failing\n"
    "\n"
    "example: m3-ref forward --model models/tiny --tokens 1,2,3 --dump /tmp/acts.safetensors\n";

static const char *HELP_GENERATE =
    "usage: m3-ref generate --model DIR (--tokens IDS | --prompt TEXT | --conversation FILE)\n"
    "                       [--max-new-tokens N]\n"
    "                       [--greedy | --temperature T --top-p P --top-k K --seed S]\n"
    "                       [--draft DIR [--spec-tokens K]]\n"
    "                       [--image FILE]... [--video F1,F2,... --fps R] [--pixels FILE]\n"
    "                       [--vision-joint]\n"
    "                       [--chat [--system TEXT] [--thinking adaptive|enabled|disabled]]\n"
    "                       [--print-ids] [--dtype fp32|bf16] [--strict] [--quiet]\n"
    "                       [--lenient-config]\n"
    "\n"
    "Continue the prompt one token at a time (KV cache), streaming each new token as it is\n"
    "produced; stops after N new tokens, at the end-of-sequence token, or when the context\n"
    "(max_position_embeddings) is full. Timing (tokens/s) goes to stderr at the end.\n"
    "\n"
    "  --model DIR            checkpoint directory\n"
    "  --tokens IDS           prompt token ids, separated by commas and/or spaces\n"
    "  --prompt TEXT          prompt text, encoded with DIR/tokenizer.json (special-token\n"
    "                         strings in it are matched as special tokens)\n"
    "  --chat                 render --prompt as the user turn of a MiniMax-M3 conversation\n"
    "                         (system turn, developer turn, ]~b]user ... [e~[, ]~b]ai opener)\n"
    "  --system TEXT          with --chat: the developer turn instead of the default\n"
    "  --conversation FILE    render the conversation in FILE (JSON: messages, tools,\n"
    "                         thinking_mode, ...; docs/tokenizer.md) as the prompt\n"
    "  --thinking MODE        with --chat or --conversation: adaptive (default; the model\n"
    "                         decides), enabled\n"
    "                         (prompt ends with <mm:think>) or disabled (ends with </mm:think>)\n"
    "  --max-new-tokens N     at most N new tokens (default 32)\n"
    "  --greedy               always take the most likely token (lowest id on ties)\n"
    "  --temperature T        sampling temperature: 0 means greedy; otherwise in\n"
    "                         [1e-4, 1e6] (smaller ones would overflow logit / T)\n"
    "  --top-p P              nucleus sampling mass in (0, 1]; 1 turns it off\n"
    "  --top-k K              keep the K most likely tokens; 0 turns it off\n"
    "  --seed S               seed of the sampler's random stream (default 0)\n"
    "                         Defaults of T, P, K (and greedy when do_sample is false) come\n"
    "                         from DIR/generation_config.json when present, else\n"
    "                         temperature 1.0, top_p 0.95, top_k 40.\n"
    "  --print-ids            stdout carries only the generated ids, comma-separated\n"
    "  --draft DIR            speculative decoding with the Eagle3 drafter in DIR (its\n"
    "                         embed_tokens / lm_head / norm default to the target's); the\n"
    "                         output follows the same distribution as without it (greedy:\n"
    "                         identical tokens); acceptance rate and tokens per target\n"
    "                         forward go to stderr at the end\n"
    "  --spec-tokens K        drafts per verification forward with --draft (default 3, <= 32)\n"
    "  --image FILE           a PNG or JPEG for the next image marker (repeatable, in prompt\n"
    "                         order): each image marker id in the ids becomes start, N image\n"
    "                         tokens and end (N = merged 28x28 windows after smart_resize);\n"
    "                         the ids are the config's image_token_id, image_start_token_id\n"
    "                         and image_end_token_id (released values 200025, 200029, 200030)\n"
    "  --video F1,F2,...      the frames of one video (for the config's video_token_id,\n"
    "                         released 200026), with --fps R\n"
    "  --fps R                frames per second of --video (timestamps)\n"
    "  --pixels FILE          preprocessed pixel_values fp32 [N,1176] and image_grid_thw\n"
    "                         int32 [n,3] (safetensors) instead of image files\n"
    "  --vision-joint         one attention over all images (HF's behaviour, for comparisons;\n"
    "                         default: one segment per image / 4-group video segment)\n"
    "  --dtype fp32|bf16      numeric mode (default fp32)\n"
    "  --strict               fail (exit 1) when logits hold NaN or Inf (default: warn once)\n"
    "  --quiet                no progress line and no summary (timing) on stderr\n"
    "  --lenient-config       warn about unknown config.json keys instead of failing\n"
    "\n"
    "The end-of-sequence id is eos_token_id of generation_config.json (a number or a list),\n"
    "else of config.json. A generated eos is printed, then generation stops.\n"
    "\n"
    "example: m3-ref generate --model models/tiny --tokens 1,2,3,4 --max-new-tokens 16 --greedy\n";

static const char *HELP_INSPECT =
    "usage: m3-ref inspect --model DIR [--lenient-config]\n"
    "\n"
    "Print the architecture read from DIR/config.json and a parameter table by group\n"
    "(embeddings, attention, indexer, routed experts, shared experts, dense MLP, router and\n"
    "norms, vision, projector, lm_head) with total and active-per-token counts. Weights are\n"
    "memory-mapped and never read in full.\n"
    "\n"
    "  --model DIR            checkpoint directory\n"
    "  --lenient-config       warn about unknown config.json keys instead of failing\n";

/* ------------------------------------------------------------------------ */
/* argument parsing                                                         */

/* Parse "1,2,3" / "1 2 3" / "1, 2, 3" into a fresh array (ref/cli_opts.h). Each id is a plain
 * decimal in [0, INT32_MAX]; empty lists, empty items, signs and other
 * characters are rejected with a message in why. */
static int parse_tokens(const char *s, int32_t **out, int *n, char *why, size_t whylen)
{
    m3_err e = {{0}};
    if (m3_cli_parse_tokens(s, out, n, &e) != 0) {
        snprintf(why, whylen, "%s", e.msg);
        return -1;
    }
    return 0;
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "m3-ref %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(run 'm3-ref %s --help' for usage)\n", cmd);
    return -1;
}

/* Parse argv[0..argc) of a subcommand into o (ref/cli_opts.h, the parser
 * bin/m3-gpu shares) taking the option groups in allow. Returns 0, or -1
 * after printing. */
static int parse_opts(const char *cmd, int argc, char **argv, unsigned allow, m3_cli_opts *o)
{
    m3_err e = {{0}};
    if (m3_cli_parse(argc, argv, allow, o, &e) != 0)
        return usage_error(cmd, "%s", e.msg);
    return 0;
}

/* Exit-2 check of --tokens ids against the vocabulary (before any forward). */
static int check_token_range(const char *cmd, const int32_t *ids, int T, int V)
{
    for (int t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= V) {
            fprintf(stderr, "m3-ref %s: --tokens: token %d at position %d is out of range [0, %d)\n",
                    cmd, (int)ids[t], t, V);
            return -1;
        }
    return 0;
}

/* Count the non-finite entries of x [n]. */
static size_t count_nonfinite(const float *x, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += !isfinite(x[i]);
    return k;
}

/* The paths an output may not overwrite: the checkpoint's files and every other input. */
typedef struct input_list {
    const char *p[M3_CLI_MAX_IMAGES + 16];
    char own[8][4200];
    int n, nown;
} input_list;

static void inputs_add(input_list *l, const char *p)
{
    if (p && l->n < (int)(sizeof l->p / sizeof l->p[0]))
        l->p[l->n++] = p;
}

static void inputs_add_in(input_list *l, const char *dir, const char *name)
{
    if (!dir || l->nown == 8)
        return;
    snprintf(l->own[l->nown], sizeof l->own[0], "%s/%s", dir, name);
    inputs_add(l, l->own[l->nown++]);
}

/* Refuse `out` (-1, printed) when it is the same file as an input: the model's
 * config.json, generation_config.json, tokenizer files, index and shards, the
 * images, the pixels file or the case's files. */
static int check_output(const char *cmd, const char *flag, const char *out, const m3_model *m,
                        input_list *l)
{
    inputs_add_in(l, m->dir, "config.json");
    inputs_add_in(l, m->dir, "generation_config.json");
    inputs_add_in(l, m->dir, "tokenizer.json");
    inputs_add_in(l, m->dir, "tokenizer_config.json");
    inputs_add_in(l, m->dir, "model.safetensors.index.json");
    for (int i = 0; i < l->n; i++)
        if (m3_same_file(out, l->p[i])) {
            fprintf(stderr, "m3-ref %s: %s %s is an input (%s); refusing to overwrite it\n", cmd,
                    flag, out, l->p[i]);
            return -1;
        }
    const char *prev = NULL;
    for (size_t i = 0; i < m3_store_count(m->store); i++) {
        const char *f = m3_store_at(m->store, i)->file;
        if (f && f != prev && m3_same_file(out, f)) {
            fprintf(stderr, "m3-ref %s: %s %s is an input (the checkpoint file %s); refusing to "
                            "overwrite it\n",
                    cmd, flag, out, f);
            return -1;
        }
        prev = f;
    }
    return 0;
}

/* forward --case DIR: input_ids [T] of DIR/inputs.safetensors, checked against
 * case.json's params.T and params.chunks; *max_new = params.max_new_tokens (0 when
 * absent). Prints and returns -1 on bad input. */
static int load_case_inputs(const char *dir, int32_t **ids, int *T, long long *max_new)
{
    char p[4200];
    m3_err e = {{0}};
    m3_store *st = NULL;
    *ids = NULL;
    *max_new = 0;
    snprintf(p, sizeof p, "%s/inputs.safetensors", dir);
    if (m3_store_open(&st, p, &e) != 0) {
        fprintf(stderr, "m3-ref forward: --case: %s\n", e.msg);
        return -1;
    }
    const m3_tensor *t = m3_store_get(st, "input_ids");
    int rc = -1;
    if (m3_store_get(st, "pixel_values")) {
        fprintf(stderr, "m3-ref forward: --case: %s holds pixel_values: image cases run through "
                        "m3-conform (or --tokens with --pixels)\n", p);
        goto out;
    }
    if (!t || t->ndim != 1 || t->shape[0] <= 0 || t->shape[0] > M3_TOKENS_MAX ||
        (t->dtype != M3_I32 && t->dtype != M3_I64)) {
        fprintf(stderr, "m3-ref forward: --case: %s needs \"input_ids\", a non-empty I32 or I64 "
                        "vector [T]\n", p);
        goto out;
    }
    const int n = (int)t->shape[0];
    *ids = malloc((size_t)n * sizeof **ids);
    if (!*ids) {
        fprintf(stderr, "m3-ref forward: --case: out of memory\n");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        int64_t v;
        if (t->dtype == M3_I32) {
            int32_t v32;
            memcpy(&v32, (const char *)t->data + 4 * (size_t)i, 4);
            v = v32;
        } else {
            memcpy(&v, (const char *)t->data + 8 * (size_t)i, 8);
        }
        if (v < 0 || v > INT32_MAX) {
            fprintf(stderr, "m3-ref forward: --case: %s: input_ids[%d] = %lld is not a token id\n",
                    p, i, (long long)v);
            goto out;
        }
        (*ids)[i] = (int32_t)v;
    }
    *T = n;
    /* case.json: params.T, params.chunks, params.max_new_tokens */
    snprintf(p, sizeof p, "%s/case.json", dir);
    char *txt = NULL;
    size_t len = 0;
    if (m3_read_file(p, 1u << 20, &txt, &len, &e) != 0) {
        fprintf(stderr, "m3-ref forward: --case: %s\n", e.msg);
        goto out;
    }
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    const cJSON *params = root ? cJSON_GetObjectItemCaseSensitive(root, "params") : NULL;
    const cJSON *jT = cJSON_GetObjectItemCaseSensitive(params, "T");
    const cJSON *jc = cJSON_GetObjectItemCaseSensitive(params, "chunks");
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(params, "max_new_tokens");
    int bad = !cJSON_IsObject(params);
    if (bad)
        fprintf(stderr, "m3-ref forward: --case: %s: no \"params\" object\n", p);
    if (!bad && jT && (!cJSON_IsNumber(jT) || jT->valuedouble != (double)n)) {
        fprintf(stderr, "m3-ref forward: --case: %s: params.T disagrees with input_ids (%d tokens)\n",
                p, n);
        bad = 1;
    }
    if (!bad && jc) {
        double sum = 0;
        const cJSON *x;
        if (!cJSON_IsArray(jc))
            bad = 1;
        else
            cJSON_ArrayForEach(x, jc) sum += cJSON_IsNumber(x) ? x->valuedouble : 1e300;
        if (bad || sum != (double)n) {
            fprintf(stderr, "m3-ref forward: --case: %s: params.chunks do not sum to the %d tokens "
                            "of input_ids\n", p, n);
            bad = 1;
        }
    }
    if (!bad && jn) {
        if (!cJSON_IsNumber(jn) || jn->valuedouble < 0 || jn->valuedouble > 1e6 ||
            jn->valuedouble != (double)(long long)jn->valuedouble) {
            fprintf(stderr, "m3-ref forward: --case: %s: params.max_new_tokens must be an integer "
                            "in [0, 1e6]\n", p);
            bad = 1;
        } else {
            *max_new = (long long)jn->valuedouble;
        }
    }
    cJSON_Delete(root);
    if (!bad)
        rc = 0;
out:
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    m3_store_close(st);
    return rc;
}

static m3_mode mode_of(const m3_cli_opts *o)
{
    return m3_cli_bf16(o) ? M3_MODE_BF16 : M3_MODE_FP32;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Open the model in o->model, printing the error or the mtp notice. */
static int open_model(const char *cmd, m3_model *m, const m3_cli_opts *o)
{
    m3_err e = {{0}};
    m3_model_opts mo = {.lenient_config = o->lenient};
    char notes[700];
    if (m3_model_open(m, o->model, &mo, &e) != 0) {
        fprintf(stderr, "m3-ref %s: %s\n", cmd, e.msg);
        return -1;
    }
    m3_model_notes(m, notes, sizeof notes);
    fputs(notes, stderr);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* images and video                                                         */

static int mm_requested(const m3_cli_opts *o)
{
    return m3_cli_vision_requested(o);
}

/* Check the combination of prompt options (chat, images, video; the rules of
 * ref/prompt.h, shared with bin/m3-gpu); prints and returns -1 on misuse. */
static int prompt_check(const char *cmd, const m3_cli_opts *o)
{
    m3_err e = {{0}};
    if (m3_cli_prompt_check(o, &e) != 0)
        return usage_error(cmd, "%s", e.msg);
    return 0;
}

/* Run the multimodal front end (ref/multimodal.h) on ids [*T] (with tok, a
 * video's temporal groups get their timestamp text, as the upstream
 * processor writes it into a text prompt): on success
 * *x holds the input embeddings [*T', H] (T' after placeholder expansion) and
 * *T is updated. frames_buf/frames are scratch owned by the caller. */
static int mm_prepare(const m3_model *m, const m3_cli_opts *o, m3_mode mode,
                      const m3_tokenizer *tok, int32_t **ids, int *T, float **x,
                      m3_st_writer *dump, m3_err *e)
{
    char *buf = NULL;
    const char **frames = NULL;
    int nframes = 0;
    if (o->video && (nframes = m3_mm_split_frames(o->video, &buf, &frames, e)) < 0) {
        free(buf);
        free(frames);
        return -1;
    }
    m3_mm_request r = {
        .image_paths = o->images,
        .n_images = o->n_images,
        .video_paths = frames,
        .n_video_frames = nframes,
        .fps = o->fps,
        .pixels_path = o->pixels,
        .joint = o->vision_joint,
        .mode = mode,
        .tok = tok,
    };
    int32_t *ids2 = NULL;
    int64_t n2 = 0;
    int rc = m3_mm_prepare(m, &r, *ids, *T, x, &ids2, &n2, dump, e);
    free(buf);
    free(frames);
    if (rc != 0)
        return -1;
    if (n2 <= 0 || n2 > INT_MAX) {
        free(*x);
        free(ids2);
        *x = NULL;
        return m3_fail(e, "the multimodal prompt has %lld positions", (long long)n2);
    }
    free(*ids);
    *ids = ids2;
    *T = (int)n2;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* tokenizer seam                                                           */

/* Open DIR's tokenizer (tokenizer.json, tokenizer_config.json). Returns NULL
 * with a message in why when there is none or it does not load. */
static m3_tokenizer *open_tokenizer(const char *dir, char *why, size_t whylen)
{
    m3_tokenizer *tok = NULL;
    m3_err e = {{0}};
    if (m3_tokenizer_open(&tok, dir, &e) != 0) {
        snprintf(why, whylen, "%s", e.msg);
        return NULL;
    }
    return tok;
}

/* Turn --prompt TEXT into token ids with tok (ref/prompt.h): with --chat the
 * text becomes the user turn of a MiniMax-M3 conversation (M3-CHAT-*) in the
 * chosen thinking mode; otherwise it is encoded as it is. Special-token
 * strings in the text are matched as special tokens, as HF tokenizers do by
 * default. */
static int prompt_to_ids(const m3_tokenizer *tok, const m3_cli_opts *o, int32_t **ids, int *n,
                         char *why, size_t whylen)
{
    m3_err e = {{0}};
    const m3_prompt_opts po = {.have_text = o->prompt != NULL, .chat = o->chat, .system = o->system,
                               .thinking = o->thinking, .conversation = o->conversation};
    size_t count = 0;
    *n = 0;
    if (m3_prompt_encode(tok, o->prompt, &po, ids, &count, &e) != 0) {
        snprintf(why, whylen, "%s", e.msg);
        return -1;
    }
    if (count > INT_MAX) {
        free(*ids);
        *ids = NULL;
        snprintf(why, whylen, "the prompt encodes to %zu tokens", count);
        return -1;
    }
    *n = (int)count;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* forward                                                                  */

static int cmd_forward(int argc, char **argv)
{
    m3_cli_opts o;
    if (parse_opts("forward", argc, argv,
                   M3_CLI_TOKENS | M3_CLI_PROMPT | M3_CLI_DUMP | M3_CLI_DTYPE | M3_CLI_VISION |
                       M3_CLI_CASE | M3_CLI_STRICT | M3_CLI_CONVERSATION, &o) != 0 ||
        prompt_check("forward", &o) != 0)
        return EXIT_USAGE;
    if (o.help) {
        fputs(HELP_FORWARD, stdout);
        return 0;
    }
    if (!!o.tokens + !!o.prompt + !!o.case_dir != 1) {
        usage_error("forward", "%s", "give exactly one of --tokens IDS, --prompt TEXT and --case DIR");
        return EXIT_USAGE;
    }
    int32_t *ids = NULL;
    int T = 0;
    long long max_new = 0; /* --case: params.max_new_tokens */
    char why[8800]; /* room for paths of up to 4 KiB */
    if (o.case_dir && load_case_inputs(o.case_dir, &ids, &T, &max_new) != 0)
        return EXIT_USAGE;
    if (o.tokens && parse_tokens(o.tokens, &ids, &T, why, sizeof why) != 0) {
        fprintf(stderr, "m3-ref forward: --tokens: %s\n", why);
        return EXIT_USAGE;
    }
    if (o.prompt) { /* --prompt: encoded with DIR's tokenizer, the ids printed */
        m3_tokenizer *tokzr = open_tokenizer(o.model, why, sizeof why);
        if (!tokzr) {
            fprintf(stderr, "m3-ref forward: --prompt needs a tokenizer: %s\n", why);
            return EXIT_RUN;
        }
        int prc = prompt_to_ids(tokzr, &o, &ids, &T, why, sizeof why);
        m3_tokenizer_free(tokzr);
        if (prc != 0) {
            fprintf(stderr, "m3-ref forward: %s\n", why);
            return EXIT_RUN;
        }
        printf("ids:");
        for (int i = 0; i < T; i++)
            printf("%s%d", i ? "," : " ", ids[i]);
        printf("\n");
    }

    int rc = EXIT_RUN;
    m3_progress pg;
    m3_progress_init_stderr(&pg, "m3-ref forward", o.quiet);
    m3_model m;
    m3_state *s = NULL;
    m3_st_writer *w = NULL;
    float *logits = NULL;
    float *x = NULL; /* input embeddings of a multimodal prompt */
    m3_err e = {{0}};
    memset(&m, 0, sizeof m);
    if (open_model("forward", &m, &o) != 0)
        goto out;
    const int V = m.cfg.text.vocab_size;
    const m3_mode mode = mode_of(&o);
    if (!mm_requested(&o) && check_token_range("forward", ids, T, V) != 0) {
        rc = EXIT_USAGE;
        goto out;
    }
    if (o.dump) {
        input_list in;
        memset(&in, 0, sizeof in);
        for (int i = 0; i < o.n_images; i++)
            inputs_add(&in, o.images[i]);
        inputs_add(&in, o.pixels);
        inputs_add_in(&in, o.case_dir, "inputs.safetensors");
        inputs_add_in(&in, o.case_dir, "case.json");
        inputs_add_in(&in, o.case_dir, "expected.safetensors");
        if (check_output("forward", "--dump", o.dump, &m, &in) != 0) {
            rc = EXIT_USAGE;
            goto out;
        }
    }
    if (o.dump && !(w = m3_st_writer_new())) {
        m3_fail(&e, "cannot allocate the dump writer");
        goto fail;
    }
    double t0 = now_s();
    if (mm_requested(&o) && mm_prepare(&m, &o, mode, NULL, &ids, &T, &x, w, &e) != 0)
        goto fail;
    s = m3_state_new(&m, T + max_new, mode, &e);
    if (!s)
        goto fail;
    logits = malloc((size_t)T * (size_t)V * sizeof *logits);
    if (!logits) {
        m3_fail(&e, "cannot allocate logits [%d, %d]", T, V);
        goto fail;
    }
    m3_state_set_progress(s, &pg); /* one row per layer: T x L */
    m3_progress_task(&pg, "", M3_UNIT_ROWS, (int64_t)T * m.cfg.text.num_layers);
    if (x ? m3_forward_embeds(&m, s, x, T, logits, w, &e) : m3_forward(&m, s, ids, T, logits, w, &e))
        goto fail;
    size_t nonfinite = count_nonfinite(logits, (size_t)T * (size_t)V);
    if (max_new > 0) { /* --case with params.max_new_tokens: the greedy continuation */
        int32_t *gen = malloc((size_t)max_new * sizeof *gen);
        float *row = malloc((size_t)V * sizeof *row);
        int grc = gen && row ? 0 : m3_fail(&e, "cannot allocate %lld greedy tokens", max_new);
        if (grc == 0)
            memcpy(row, logits + (size_t)(T - 1) * (size_t)V, (size_t)V * sizeof *row);
        for (long long j = 0; grc == 0 && j < max_new; j++) {
            gen[j] = m3_argmax(row, V);
            if (j + 1 < max_new) {
                grc = m3_forward(&m, s, &gen[j], 1, row, NULL, &e);
                nonfinite += grc == 0 ? count_nonfinite(row, (size_t)V) : 0;
            }
        }
        const int64_t gshape[1] = {max_new};
        if (grc == 0 && w)
            grc = m3_st_writer_add(w, "greedy_tokens", M3_I32, 1, gshape, gen, &e);
        free(gen);
        free(row);
        if (grc != 0)
            goto fail;
    }
    m3_progress_end(&pg);
    double dt = now_s() - t0;
    if (nonfinite > 0) {
        fprintf(stderr, "%s: the logits hold %zu NaN or Inf values (NaN weights or inputs?); "
                        "argmax and the summary below are not meaningful\n",
                o.strict ? "m3-ref forward: error" : "warning", nonfinite);
        if (o.strict)
            goto out;
    }
    if (w) {
        char buf[64];
        /* M3-DUMP-1 metadata */
        if (m3_st_writer_meta(w, "m3.dump_version", "1", &e) != 0 ||
            m3_st_writer_meta(w, "m3.mode", mode == M3_MODE_BF16 ? "bf16" : "fp32", &e) != 0 ||
            m3_st_writer_meta(w, "m3.producer", "m3-ref forward (reference)", &e) != 0)
            goto fail;
        snprintf(buf, sizeof buf, "%d", T);
        if (m3_st_writer_meta(w, "m3.T", buf, &e) != 0 || m3_st_writer_save(w, o.dump, &e) != 0)
            goto fail;
    }

    /* summary: T and the top-5 of the last row */
    const float *last = logits + (size_t)(T - 1) * (size_t)V;
    int32_t top[5];
    const int ntop = m3_top_ids(last, V, 5, top);
    printf("T=%d mode=%s layers=%d vocab=%d (%.3f s)\n", T, mode == M3_MODE_BF16 ? "bf16" : "fp32",
           m.cfg.text.num_layers, V, dt);
    printf("top-5 of logits[%d]:", T - 1);
    for (int j = 0; j < ntop; j++)
        printf(" %d (%.6g)%s", top[j], (double)last[top[j]], j + 1 < ntop ? "," : "");
    printf("\n");
    if (o.dump)
        printf("dump: %s\n", o.dump);
    snprintf(why, sizeof why, "%d tokens, %d layers, %.1f tokens/s", T, m.cfg.text.num_layers,
             dt > 0 ? T / dt : 0.0);
    m3_progress_summary(&pg, why);
    rc = 0;
    goto out;
fail:
    m3_progress_end(&pg);
    fprintf(stderr, "m3-ref forward: %s\n", e.msg);
out:
    free(x);
    free(logits);
    m3_st_writer_free(w);
    m3_state_free(s);
    m3_model_close(&m);
    free(ids);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* generate                                                                 */

static int cmd_generate(int argc, char **argv)
{
    m3_cli_opts o;
    if (parse_opts("generate", argc, argv,
                   M3_CLI_TOKENS | M3_CLI_PROMPT | M3_CLI_DTYPE | M3_CLI_GEN | M3_CLI_VISION |
                       M3_CLI_STRICT | M3_CLI_CONVERSATION, &o) != 0 ||
        prompt_check("generate", &o) != 0)
        return EXIT_USAGE;
    if (o.help) {
        fputs(HELP_GENERATE, stdout);
        return 0;
    }
    const int text_in = o.prompt || o.conversation;
    if (!!o.tokens == text_in) {
        usage_error("generate", "%s", "give exactly one of --tokens IDS, --prompt TEXT and "
                                      "--conversation FILE");
        return EXIT_USAGE;
    }
    if (o.greedy && (o.have_temp || o.have_top_p || o.have_top_k || o.have_seed)) {
        usage_error("generate", "%s", "--greedy cannot be combined with --temperature, --top-p, "
                                      "--top-k or --seed");
        return EXIT_USAGE;
    }
    int32_t *ids = NULL;
    int T = 0;
    char why[8800]; /* room for paths of up to 4 KiB */
    if (o.tokens && parse_tokens(o.tokens, &ids, &T, why, sizeof why) != 0) {
        fprintf(stderr, "m3-ref generate: --tokens: %s\n", why);
        return EXIT_USAGE;
    }
    /* The tokenizer: required for --prompt; used for text output when present. */
    m3_tokenizer *tokzr = NULL;
    if (text_in || !o.print_ids) {
        tokzr = open_tokenizer(o.model, why, sizeof why);
        if (!tokzr && text_in) {
            fprintf(stderr, "m3-ref generate: %s needs a tokenizer: %s\n",
                    o.prompt ? "--prompt" : "--conversation", why);
            return EXIT_RUN;
        }
    }
    if (text_in && prompt_to_ids(tokzr, &o, &ids, &T, why, sizeof why) != 0) {
        fprintf(stderr, "m3-ref generate: %s\n", why);
        m3_tokenizer_free(tokzr);
        return EXIT_RUN;
    }
    m3_decode_stream ds;
    m3_decode_stream_init(&ds, 0);

    int rc = EXIT_RUN;
    m3_progress pg;
    m3_progress_init_stderr(&pg, "m3-ref generate", o.quiet);
    m3_model m;
    m3_state *s = NULL;
    float *logits = NULL;
    float *x = NULL; /* input embeddings of a multimodal prompt */
    m3_sampler sp;
    int have_sampler = 0;
    m3_err e = {{0}};
    memset(&m, 0, sizeof m);
    if (open_model("generate", &m, &o) != 0)
        goto out;
    if (o.tokens && !mm_requested(&o) &&
        check_token_range("generate", ids, T, m.cfg.text.vocab_size) != 0) {
        rc = EXIT_USAGE;
        goto out;
    }

    /* sampling settings: flags override generation_config.json, which overrides the built-in
     * defaults (temperature 1.0, top_p 0.95, top_k 40) */
    m3_gen_defaults g = m3_gen_defaults_builtin(m.cfg.text.eos_token_id);
    if (m3_gen_config_load(o.model, &g, &e) != 0)
        goto fail;
    /* an eos the model can never produce is a typo (config.json's own id, the released
     * default when it gives none, is checked when it is given) */
    for (int j = 0; j < g.n_eos; j++)
        if (g.eos[j] != m.cfg.text.eos_token_id && (g.eos[j] < 0 || g.eos[j] >= m.cfg.text.vocab_size)) {
            m3_fail(&e, "%s/generation_config.json: eos_token_id %d is not in the vocabulary [0, %d)",
                    o.model, (int)g.eos[j], m.cfg.text.vocab_size);
            goto fail;
        }
    const int flag_top_k = (int)o.top_k;
    m3_gen_apply_flags(&g, o.greedy, o.have_temp ? &o.temperature : NULL,
                       o.have_top_p ? &o.top_p : NULL, o.have_top_k ? &flag_top_k : NULL);
    const int greedy = g.greedy;
    const float temp = g.temperature, top_p = g.top_p;
    const int top_k = g.top_k;
    const int V = m.cfg.text.vocab_size;
    if (m3_sampler_init(&sp, V, greedy, temp, top_k, top_p, (uint64_t)o.seed) != 0) {
        m3_fail(&e, "cannot allocate the sampler for vocab %d", V);
        goto fail;
    }
    have_sampler = 1;
    if (mm_requested(&o) && mm_prepare(&m, &o, mode_of(&o), text_in ? tokzr : NULL, &ids, &T, &x, NULL, &e) != 0)
        goto fail;

    /* capacity: prompt + new tokens, capped by the context length (generation stops there) */
    int64_t cap = (int64_t)T + o.max_new;
    const int64_t maxpos = m.cfg.text.max_position_embeddings;
    int capped = 0;
    if (maxpos > 0 && cap > maxpos && T <= maxpos) {
        cap = maxpos;
        capped = 1;
    }
    s = m3_state_new(&m, cap, mode_of(&o), &e);
    if (!s)
        goto fail;
    logits = malloc((size_t)V * sizeof *logits);
    if (!logits) {
        m3_fail(&e, "cannot allocate logits [%d]", V);
        goto fail;
    }

    /* --draft: speculative decoding (M3-EAGLE-VERIFY-1/2) produces all tokens first; the
     * loop below then prints them (spec_out) instead of sampling */
    int32_t *spec_out = NULL;
    int spec_n = 0;
    m3_spec_stats spec_st;
    memset(&spec_st, 0, sizeof spec_st);
    double t0 = now_s();
    m3_state_set_progress(s, &pg); /* prefill: one row per layer, T x L */
    if (o.draft) /* prefill and verification forwards: their count is not known ahead */
        m3_progress_task(&pg, "speculative decoding", M3_UNIT_ROWS, 0);
    else
        m3_progress_task(&pg, "prefill", M3_UNIT_ROWS, (int64_t)T * m.cfg.text.num_layers);
    if (o.draft) {
        if (x) {
            m3_fail(&e, "--draft works on token prompts only (no --image, --video or --pixels)");
            goto fail;
        }
        m3_eagle3 d;
        m3_eagle3_opts dop = {.lenient_config = o.lenient};
        long long n_max = o.max_new;
        if (capped && n_max > cap - T + 1) /* what plain decoding can reach */
            n_max = cap - T + 1;
        if (m3_eagle3_open(&d, o.draft, &m, &dop, &e) != 0)
            goto fail;
        m3_eagle3_state *dst = m3_eagle3_state_new(&d, cap, &e);
        spec_out = malloc(sizeof(int32_t) * (size_t)(n_max > 0 ? n_max : 1));
        m3_spec_opts so = {.k = (int)o.spec_k, .max_new_tokens = (int)n_max, .eos = g.eos,
                           .n_eos = g.n_eos};
        int src = dst && spec_out ? 0 : -1;
        if (!spec_out)
            m3_fail(&e, "cannot allocate %lld output tokens", n_max);
        if (src == 0 && n_max > 0)
            src = m3_spec_generate(&m, s, &d, dst, ids, T, &sp, &so, spec_out, &spec_n, &spec_st,
                                   &e);
        m3_eagle3_state_free(dst);
        m3_eagle3_close(&d);
        if (src != 0) {
            free(spec_out);
            goto fail;
        }
    } else {
        /* prefill: all but the last prompt position without logits, then the last with */
        if (x) {
            const size_t H = (size_t)m.cfg.text.hidden_size;
            if (T > 1 && m3_forward_embeds(&m, s, x, T - 1, NULL, NULL, &e) != 0)
                goto fail;
            if (m3_forward_embeds(&m, s, x + (size_t)(T - 1) * H, 1, logits, NULL, &e) != 0)
                goto fail;
        } else {
            if (T > 1 && m3_forward(&m, s, ids, T - 1, NULL, NULL, &e) != 0)
                goto fail;
            if (m3_forward(&m, s, ids + T - 1, 1, logits, NULL, &e) != 0)
                goto fail;
        }
    }
    double t_prefill = now_s() - t0;
    m3_state_set_progress(s, NULL);
    m3_progress_end(&pg);

    if (!o.print_ids && !tokzr)
        fprintf(stderr, "m3-ref: %s has no usable tokenizer; printing token ids\n", o.model);
    if (tokzr && !o.print_ids && o.prompt) /* echo the prompt: the continuation reads in context */
        fwrite(o.prompt, 1, strlen(o.prompt), stdout);
    long long produced = 0;
    int stop_eos = 0, reader_gone = 0, warned_nan = 0;
    double t1 = now_s();
    /* decode progress only where it cannot mix with the streamed text */
    if (!spec_out && !isatty(fileno(stdout)))
        m3_progress_task(&pg, "decode", M3_UNIT_TOKENS,
                         capped && o.max_new > cap - T + 1 ? cap - T + 1 : o.max_new);
    while (produced < (spec_out ? spec_n : o.max_new)) {
        if (!spec_out && !warned_nan && count_nonfinite(logits, (size_t)V) > 0) {
            warned_nan = 1;
            fprintf(stderr, "\n%s: the logits at position %lld hold NaN or Inf (NaN weights or "
                            "inputs?); the tokens chosen from them are not meaningful\n",
                    o.strict ? "m3-ref generate: error" : "warning",
                    (long long)m3_state_len(s) - 1);
            if (o.strict) {
                printf("\n");
                goto out;
            }
        }
        int32_t tok = spec_out ? spec_out[produced] : m3_sample(&sp, logits);
        if (o.print_ids) {
            printf("%s%d", produced ? "," : "", (int)tok);
        } else if (tokzr) {
            const char *txt;
            size_t txtlen;
            if (m3_tokenizer_decode_stream(tokzr, &ds, tok, &txt, &txtlen, &e) != 0) {
                printf("\n");
                goto fail;
            }
            fwrite(txt, 1, txtlen, stdout);
        } else {
            printf("%s%d", produced ? " " : "", (int)tok);
        }
        const int werr = fflush(stdout) != 0 || ferror(stdout);
        produced++;
        m3_progress_add(&pg, 1);
        if (werr) { /* EPIPE: the reader went away (| head), nobody wants the rest; other
                     * errors are reported by finish_stdout */
            reader_gone = errno == EPIPE;
            break;
        }
        for (int j = 0; j < g.n_eos; j++)
            stop_eos |= tok == g.eos[j];
        if (stop_eos || produced == o.max_new)
            break;
        if (spec_out)
            continue;
        if (m3_state_len(s) >= cap)
            break;
        if (m3_forward(&m, s, &tok, 1, logits, NULL, &e) != 0) {
            printf("\n");
            goto fail;
        }
    }
    double t_decode = now_s() - t1;
    m3_progress_end(&pg);
    if (spec_out) {
        free(spec_out);
        fprintf(stderr,
                "m3-ref: speculative (K %lld): %lld tokens in %lld target forwards (%.2f tokens per "
                "target forward); acceptance %.1f%% (%lld of %lld drafts); %.3f s (%.2f tokens/s)\n",
                o.spec_k, (long long)spec_st.generated, (long long)spec_st.target_forwards,
                spec_st.tokens_per_forward, 100.0 * spec_st.acceptance_rate,
                (long long)spec_st.accepted, (long long)spec_st.drafted, t_prefill,
                t_prefill > 0 ? (double)spec_st.generated / t_prefill : 0.0);
    }
    if (tokzr && !o.print_ids) {
        const char *txt;
        size_t txtlen;
        if (m3_decode_stream_flush(&ds, &txt, &txtlen, &e) != 0)
            goto fail;
        fwrite(txt, 1, txtlen, stdout);
    }
    printf("\n");
    fflush(stdout);
    if (reader_gone)
        fprintf(stderr, "m3-ref: stdout closed; stopped after %lld tokens\n", produced);
    else if (stop_eos)
        fprintf(stderr, "m3-ref: stopped at end-of-sequence token\n");
    else if (produced < o.max_new && capped)
        fprintf(stderr, "m3-ref: stopped at the context limit (max_position_embeddings %lld)\n",
                (long long)maxpos);
    /* produced tokens came from produced - 1 decode steps plus the prefill */
    long long steps = produced > 0 ? produced - 1 : 0;
    if (o.draft) /* --draft printed its own line */
        snprintf(why, sizeof why, "%lld tokens", produced);
    else
        snprintf(why, sizeof why,
                 "%s; prefill %d tokens in %.3f s (%.1f tokens/s); decode %lld tokens in %.3f s "
                 "(%.2f tokens/s)",
                 greedy ? "greedy" : "sampled", T, t_prefill, t_prefill > 0 ? T / t_prefill : 0.0,
                 steps, t_decode, t_decode > 0 ? (double)steps / t_decode : 0.0);
    m3_progress_summary(&pg, why);
    rc = 0;
    goto out;
fail:
    m3_progress_end(&pg);
    fprintf(stderr, "m3-ref generate: %s\n", e.msg);
out:
    if (have_sampler)
        m3_sampler_free(&sp);
    free(x);
    free(logits);
    m3_state_free(s);
    m3_model_close(&m);
    free(ids);
    m3_decode_stream_free(&ds);
    m3_tokenizer_free(tokzr);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* inspect                                                                  */

static int cmd_inspect(int argc, char **argv)
{
    m3_cli_opts o;
    if (parse_opts("inspect", argc, argv, 0, &o) != 0)
        return EXIT_USAGE;
    if (o.help) {
        fputs(HELP_INSPECT, stdout);
        return 0;
    }
    m3_model m;
    memset(&m, 0, sizeof m);
    if (open_model("inspect", &m, &o) != 0)
        return EXIT_RUN;
    m3_err e = {{0}};
    int rc = 0;
    if (m3_inspect_print(stdout, &m.cfg, m.store, &e) != 0) {
        fprintf(stderr, "m3-ref inspect: %s\n", e.msg);
        rc = EXIT_RUN;
    }
    m3_model_close(&m);
    return rc;
}

/* ------------------------------------------------------------------------ */

/* A command's status after its stdout is flushed: a closed pipe (EPIPE) is
 * the reader's choice and keeps it; any other write error is a run error. */
static int finish_stdout(int rc)
{
    if ((fflush(stdout) == 0 && !ferror(stdout)) || errno == EPIPE)
        return rc;
    fprintf(stderr, "m3-ref: writing stdout: %s\n", strerror(errno));
    return rc ? rc : EXIT_RUN;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* write errors are handled: see finish_stdout */
    if (argc < 2) {
        fputs(HELP_MAIN, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(HELP_MAIN, stdout);
        return 0;
    }
    if (!strcmp(cmd, "forward"))
        return finish_stdout(cmd_forward(argc - 2, argv + 2));
    if (!strcmp(cmd, "generate"))
        return finish_stdout(cmd_generate(argc - 2, argv + 2));
    if (!strcmp(cmd, "inspect"))
        return finish_stdout(cmd_inspect(argc - 2, argv + 2));
    fprintf(stderr, "m3-ref: unknown command '%s'\n\n", cmd);
    fputs(HELP_MAIN, stderr);
    return EXIT_USAGE;
}
